package controllerclient

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// connected keeps the versions of the "agent connected" log records.
type connected struct {
	mu    sync.Mutex
	nodes map[string]string
}

func (c *connected) Enabled(context.Context, slog.Level) bool { return true }
func (c *connected) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *connected) WithGroup(string) slog.Handler            { return c }
func (c *connected) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "agent connected" {
		return nil
	}
	var node, v string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "node":
			node = a.Value.String()
		case "version":
			v = a.Value.String()
		}
		return true
	})
	c.mu.Lock()
	c.nodes[node] = v
	c.mu.Unlock()
	return nil
}

// The agent's client tells the controller its version on every call (its
// gRPC user agent), and the controller's log names it.
func TestDialSendsTheAgentsVersion(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := controllertest.Start(t, st, nil, controller.Config{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &connected{nodes: map[string]string{}}
	g := grpc.NewServer(grpc.UnaryInterceptor(grpcapi.NewAgentVersions(slog.New(log), version.Version).UnaryInterceptor()))
	grpcapi.NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := Dial(lis.Addr().String(), Options{Node: "n1", Retry: backoff.Policy{Attempts: 3, Wait: noWait}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "p", UID: "u-p", Policy: "pod"}); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := log.nodes["n1"]; got != version.Version {
		t.Errorf("the controller logged node n1's agent as %q, want %q (logged: %v)", got, version.Version, log.nodes)
	}
}

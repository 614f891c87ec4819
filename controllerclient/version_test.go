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
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
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

// serveController serves a controller over gRPC on loopback until the
// test ends, with the interceptors given, and returns its address.
func serveController(t *testing.T, interceptors ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := controllertest.Start(t, st, nil, controller.Config{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	grpcapi.NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// The agent's client learns the controller's release from the header of
// its answers, refusals too; a controller that sends none (one before
// 0.3.0) is "unknown", and an in-process controller is this binary.
func TestClientLearnsTheControllersVersion(t *testing.T) {
	tests := []struct {
		name string
		// api is the controller the client calls; nil: a Dial of addr.
		api  func(t *testing.T) apiv1.ControllerClient
		addr func(t *testing.T) string
		// policy of the acquire: "claim:x" is refused (no Kubernetes API).
		policy string
		want   string
	}{
		{name: "answer names it", want: "9.8.7",
			addr: func(t *testing.T) string { return serveController(t, grpcapi.VersionHeader("9.8.7")) }},
		{name: "refusal names it", policy: "claim:x", want: "9.8.7",
			addr: func(t *testing.T) string { return serveController(t, grpcapi.VersionHeader("9.8.7")) }},
		{name: "a controller before 0.3.0 sends none", want: version.Unknown,
			addr: func(t *testing.T) string { return serveController(t) }},
		{name: "junk is not a version", want: version.Unknown,
			addr: func(t *testing.T) string { return serveController(t, grpcapi.VersionHeader("0.4.0 evil")) }},
		{name: "in-process controller is this binary", want: version.Version,
			api: func(t *testing.T) apiv1.ControllerClient {
				ec := runController(t, controller.Config{})
				select {
				case <-ec.Loaded():
				case <-time.After(controllertest.LoadTimeout):
					t.Fatalf("state did not load within %v", controllertest.LoadTimeout)
				}
				return ec.API()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Node: "n1", Retry: backoff.Policy{Attempts: 3, Wait: noWait}}
			var c *Client
			var err error
			if tt.api != nil {
				c, err = New(tt.api(t), opts)
			} else {
				c, err = Dial(tt.addr(t), opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if got := c.ControllerVersion(); got != version.Unknown {
				t.Errorf("before any call: %q, want %q", got, version.Unknown)
			}
			_, err = c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "p", UID: "u-p", Policy: tt.policy})
			if (err != nil) != (tt.policy != "") {
				t.Fatalf("acquire with policy %q: %v", tt.policy, err)
			}
			if got := c.ControllerVersion(); got != tt.want {
				t.Errorf("ControllerVersion() = %q, want %q", got, tt.want)
			}
		})
	}
}

package grpcapi

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// logged is one log record, as the tests compare them.
type logged struct {
	level                     slog.Level
	msg, node, ver, prev, own string
}

// recorder is a slog.Handler that keeps the records.
type recorder struct {
	mu   sync.Mutex
	recs []logged
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	l := logged{level: rec.Level, msg: rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "node":
			l.node = a.Value.String()
		case "version":
			l.ver = a.Value.String()
		case "previous":
			l.prev = a.Value.String()
		case "controller_version":
			l.own = a.Value.String()
		}
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, l)
	r.mu.Unlock()
	return nil
}

func (r *recorder) take() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

// headerAuth binds each call to the node its "x-node" header names.
type headerAuth struct{}

func (headerAuth) Authenticate(ctx context.Context) (auth.Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	n := md.Get("x-node")
	if len(n) != 1 {
		return auth.Identity{}, auth.ErrUnauthenticated
	}
	return auth.Identity{User: "agent", Node: n[0]}, nil
}

// The controller learns each agent's version from its gRPC user agent,
// over a real connection, and logs it once per node and again on a change;
// calls refused for another node, and calls of no node, log nothing.
func TestAgentVersionsLogged(t *testing.T) {
	rec := &recorder{}
	av := NewAgentVersions(slog.New(rec), "0.3.0")
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := controller.New(st, nil, nil, controller.Config{}) // never started: every call is Unavailable
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(auth.UnaryInterceptor(headerAuth{}), av.UnaryInterceptor()))
	NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	clients := map[string]apiv1.ControllerClient{}
	client := func(ua string) apiv1.ControllerClient {
		if c, ok := clients[ua]; ok {
			return c
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if ua != "" {
			opts = append(opts, grpc.WithUserAgent(ua))
		}
		conn, err := grpc.NewClient(lis.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[ua] = apiv1.NewControllerClient(conn)
		return clients[ua]
	}
	info, warn := slog.LevelInfo, slog.LevelWarn
	steps := []struct {
		name     string
		ua       string // the client's user agent; empty: gRPC's own (an agent before 0.2.0)
		identity string // the node the caller's credential names
		call     func(context.Context, apiv1.ControllerClient) error
		want     []logged
	}{
		{name: "first call of a node", ua: "slingshot-agent/0.3.0", identity: "n1",
			call: acquireSlices("n1"), want: []logged{{level: info, msg: "agent connected", node: "n1", ver: "0.3.0"}}},
		{name: "the same again", ua: "slingshot-agent/0.3.0", identity: "n1", call: renew("n1")},
		{name: "rolled back to an agent that sends no version", identity: "n1", call: renew("n1"),
			want: []logged{{level: info, msg: "agent version changed", node: "n1", ver: version.Unknown, prev: "0.3.0"}}},
		{name: "N-1 is served", ua: "slingshot-agent/0.2.4", identity: "n2", call: acquireSlices("n2"),
			want: []logged{{level: info, msg: "agent connected", node: "n2", ver: "0.2.4"}}},
		{name: "an agent newer than its controller is warned of", ua: "slingshot-agent/0.4.0", identity: "n3", call: acquireSlices("n3"),
			want: []logged{{level: info, msg: "agent connected", node: "n3", ver: "0.4.0"},
				{level: warn, msg: "agent outside the version-skew policy (docs/upgrade.md)", node: "n3", ver: "0.4.0", own: "0.3.0"}}},
		{name: "a call for another node logs nothing", ua: "slingshot-agent/0.1.0", identity: "n1", call: acquireSlices("n4")},
		{name: "a call of no node logs nothing", ua: "slingshot-agent/0.1.0", identity: "n5", call: func(ctx context.Context, c apiv1.ControllerClient) error {
			_, err := c.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
			return err
		}},
	}
	for _, s := range steps {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-node", s.identity)
		if err := s.call(ctx, client(s.ua)); err == nil {
			t.Fatalf("%s: the call succeeded on a controller that never loaded", s.name)
		}
		if got := rec.take(); !slices.Equal(got, s.want) {
			t.Errorf("%s: logged %+v, want %+v", s.name, got, s.want)
		}
	}
}

func acquireSlices(node string) func(context.Context, apiv1.ControllerClient) error {
	return func(ctx context.Context, c apiv1.ControllerClient) error {
		_, err := c.AcquireSlices(ctx, &apiv1.AcquireSlicesRequest{Node: node, Pool: "x", Count: 1})
		return err
	}
}

func renew(node string) func(context.Context, apiv1.ControllerClient) error {
	return func(ctx context.Context, c apiv1.ControllerClient) error {
		_, err := c.RenewSlices(ctx, &apiv1.RenewSlicesRequest{Node: node})
		return err
	}
}

// Memory stays bounded: past maxAgentsTracked nodes the record starts
// over, and a node seen before is logged once more rather than never.
func TestAgentVersionsBounded(t *testing.T) {
	rec := &recorder{}
	av := NewAgentVersions(slog.New(rec), "0.3.0")
	for i := range maxAgentsTracked + 1 {
		av.Observe("node-"+strconv.Itoa(i), "0.3.0")
	}
	av.mu.Lock()
	n := len(av.seen)
	av.mu.Unlock()
	if n > maxAgentsTracked {
		t.Fatalf("%d nodes remembered, want at most %d", n, maxAgentsTracked)
	}
	if got := len(rec.take()); got != maxAgentsTracked+1 {
		t.Errorf("%d records for %d distinct nodes", got, maxAgentsTracked+1)
	}
}

// A method the controller does not serve (what an agent of a later
// release may call) is refused naming the method and both releases, the
// controller's in the header too; an agent that sends no version is
// named unknown. gRPC's own answer named neither.
func TestUnknownMethodNamesBothReleases(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.UnknownServiceHandler(UnknownMethod("0.3.0")))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	const method = "/slingshot.controller.v1.Controller/AcquireSomethingNew"
	tests := []struct {
		name      string
		ua        string // "": gRPC's own
		wantAgent string
	}{
		{name: "an agent of a later release", ua: "slingshot-agent/0.4.0", wantAgent: "agent 0.4.0"},
		{name: "a caller that sends no version", wantAgent: "agent " + version.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if tt.ua != "" {
				opts = append(opts, grpc.WithUserAgent(tt.ua))
			}
			conn, err := grpc.NewClient(lis.Addr().String(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			var md metadata.MD
			err = conn.Invoke(t.Context(), method, &apiv1.ListVNIsRequest{}, &apiv1.ListVNIsResponse{}, grpc.Header(&md))
			st := status.Convert(err)
			if st.Code() != codes.Unimplemented {
				t.Fatalf("the call: %v, want Unimplemented", err)
			}
			for _, s := range []string{method, "controller 0.3.0", tt.wantAgent} {
				if !strings.Contains(st.Message(), s) {
					t.Errorf("the refusal %q does not say %q", st.Message(), s)
				}
			}
			if got := md.Get(version.ControllerHeader); !slices.Equal(got, []string{"0.3.0"}) {
				t.Errorf("header %s = %q, want the controller's release", version.ControllerHeader, got)
			}
		})
	}
}

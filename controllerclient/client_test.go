package controllerclient

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/embedded"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"google.golang.org/grpc"
)

func noWait(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// runClient runs c until the test ends.
func runClient(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		c.Close()
	})
}

// runController runs an in-process controller with its store under
// t.TempDir() until the test ends, as the agent's embedded mode does.
func runController(t *testing.T, cfg controller.Config) *embedded.Controller {
	t.Helper()
	ec, err := embedded.Open(t.Context(), t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller Run: %v", err)
		}
		if err := ec.Close(); err != nil {
			t.Errorf("controller Close: %v", err)
		}
	})
	return ec
}

// countingAPI counts calls that reach the controller.
type countingAPI struct {
	apiv1.ControllerClient
	n atomic.Int64
}

func (c *countingAPI) AcquireJobVNI(ctx context.Context, in *apiv1.AcquireJobVNIRequest, o ...grpc.CallOption) (*apiv1.JobVNILease, error) {
	c.n.Add(1)
	return c.ControllerClient.AcquireJobVNI(ctx, in, o...)
}

func (c *countingAPI) AcquireSlices(ctx context.Context, in *apiv1.AcquireSlicesRequest, o ...grpc.CallOption) (*apiv1.NodeSlices, error) {
	c.n.Add(1)
	return c.ControllerClient.AcquireSlices(ctx, in, o...)
}

func TestEmbeddedPodScoped(t *testing.T) {
	ec := runController(t, controller.Config{})
	c, err := New(ec.API(), Options{Node: "n1", Retry: backoff.Policy{Attempts: 50, Initial: time.Millisecond, Wait: backoff.Sleep}})
	if err != nil {
		t.Fatal(err)
	}
	runClient(t, c)
	ctx := t.Context()
	a, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p1", UID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p2", UID: "u2"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Scope != ScopePod || a.VNI == b.VNI || a.VNI < 1024 || a.Local {
		t.Fatalf("leases %+v %+v", a, b)
	}
	if again, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p1", UID: "u1"}); err != nil || again.VNI != a.VNI {
		t.Fatalf("idempotent: %+v %v", again, err)
	}
	if err := c.ReleaseJobVNI(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseJobVNI(ctx, a); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if _, err := c.PodVNI(ctx); !errors.Is(err, ErrNoPodVNIPool) {
		// The first tick learns that there is no pod pool; PodVNI waits for it.
		t.Fatalf("PodVNI without a pod range: %v", err)
	}
}

func TestLocalPoolNeedsNoCall(t *testing.T) {
	ec := runController(t, controller.Config{PodVNIRange: vnialloc.Range{Min: 2048, Max: 2175}, PodVNISliceSize: 32})
	api := &countingAPI{ControllerClient: ec.API()}
	c, err := New(api, Options{Node: "n1", LowWater: 8, Retry: backoff.Policy{Attempts: 50, Initial: time.Millisecond, Wait: backoff.Sleep}})
	if err != nil {
		t.Fatal(err)
	}
	runClient(t, c)
	ctx := t.Context()
	first, err := c.PodVNI(ctx) // waits for the first refill
	if err != nil || first < 2048 || first > 2175 {
		t.Fatalf("PodVNI: %d %v", first, err)
	}
	before := api.n.Load()
	seen := map[uint16]bool{first: true}
	for range 20 { // 32 per slice, low water 8: no refill needed yet
		v, err := c.PodVNI(ctx)
		if err != nil || seen[v] {
			t.Fatalf("PodVNI: %d %v (dup=%v)", v, err, seen[v])
		}
		seen[v] = true
	}
	if n := api.n.Load() - before; n != 0 {
		t.Fatalf("%d controller calls while the pool had VNIs", n)
	}
	// Going below low water refills ahead of need: a second slice arrives.
	for range 8 {
		if _, err := c.PodVNI(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		_, held := c.pool.counts()
		if held == 2 {
			break
		}
		c.pool.mu.Lock()
		ch := c.pool.changed
		c.pool.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("pool was not refilled")
		}
	}
	// The AcquireJobVNI path for a bare pod takes from the pool too.
	l, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "bare"})
	if err != nil || !l.Local || l.Scope != ScopePod || l.VNI < 2048 {
		t.Fatalf("bare pod lease %+v %v", l, err)
	}
	if err := c.ReleaseJobVNI(ctx, l); err != nil {
		t.Fatal(err)
	}
	if free, _ := c.pool.counts(); free == 0 {
		t.Fatal("released VNI not back in the pool")
	}
}

func TestRetriesAreBoundedAndReconnect(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens now
	c, err := Dial(addr, Options{Node: "n1", CallTimeout: 200 * time.Millisecond, Retry: backoff.Policy{Attempts: 3, Wait: noWait}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "p"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no server: %v", err)
	}
	// A controller appears on the address: the same client reconnects.
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, _ := controller.New(st, nil, nil, controller.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-svc.Loaded()
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address taken meanwhile: %v", err)
	}
	g := grpc.NewServer()
	grpcapi.NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	defer g.Stop()
	c.opts.Retry = backoff.Policy{Attempts: 40, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	if l, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "p"}); err != nil || l.VNI == 0 {
		t.Fatalf("after the server came up: %+v %v", l, err)
	}
	if _, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "A", Name: "p"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("invalid argument is not retried into something else: %v", err)
	}
}

// PodRef.Policy reaches a controller over gRPC and replaces the pod's
// annotation there; empty keeps it.
func TestAcquireJobVNIPolicy(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := controllertest.NewJobs()
	jobs.Add("w-0", controllertest.Job("a", "train"))
	jobs.SetPolicy("a", "w-0", controller.Policy{Mode: controller.ModeNone})
	jobs.End(store.Owner{Namespace: "a", Name: "missing"}) // the claim "missing" does not exist
	svc, _ := controllertest.Start(t, st, jobs, controller.Config{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	grpcapi.NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := Dial(lis.Addr().String(), Options{Node: "n1", Retry: backoff.Policy{Attempts: 3, Wait: noWait}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tests := []struct {
		policy  string
		scope   Scope
		key     string
		wantErr error
	}{
		{policy: "", scope: ScopeNone},
		{policy: "job", scope: ScopeJob, key: "job/a/" + controllertest.Job("a", "train").UID},
		{policy: "pod", scope: ScopePod, key: "pod/a/u-w-0"},
		{policy: "claim:shared", scope: ScopeClaim, key: "claim/a/shared"},
		{policy: "claim:missing", wantErr: ErrNotFound},
		{policy: "claim", wantErr: ErrInvalidArgument},
	}
	for _, tt := range tests {
		l, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: "w-0", UID: "u-w-0", Policy: tt.policy})
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("policy %q: err = %v, want %v", tt.policy, err, tt.wantErr)
			}
			continue
		}
		if err != nil || l.Scope != tt.scope || l.Key != tt.key || (l.VNI != 0) != (tt.scope != ScopeNone) {
			t.Errorf("policy %q: %+v %v, want scope %q key %q", tt.policy, l, err, tt.scope, tt.key)
		}
	}
}

// The in-process controller of the agent's embedded mode honours
// PodRef.Policy too; with no Kubernetes API it has no claims.
func TestEmbeddedPolicy(t *testing.T) {
	ec := runController(t, controller.Config{})
	c := newNodeClient(t, ec.API(), "n1")
	runClient(t, c)
	ctx := t.Context()
	if l, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p", Policy: "none"}); err != nil || l.Scope != ScopeNone || l.VNI != 0 {
		t.Fatalf("none: %+v %v", l, err)
	}
	if l, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p", Policy: "job"}); err != nil || l.Scope != ScopePod || l.VNI == 0 {
		t.Fatalf("job with no owner to find: %+v %v, want pod-scoped", l, err)
	}
	if _, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p", Policy: "claim:shared"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("claim: %v, want ErrInvalidArgument", err)
	}
}

// renewRecorder keeps the last RenewSlices request.
type renewRecorder struct {
	apiv1.ControllerClient
	last atomic.Pointer[apiv1.RenewSlicesRequest]
}

func (r *renewRecorder) RenewSlices(ctx context.Context, in *apiv1.RenewSlicesRequest, o ...grpc.CallOption) (*apiv1.RenewSlicesResponse, error) {
	r.last.Store(in)
	return r.ControllerClient.RenewSlices(ctx, in, o...)
}

func TestHeartbeatReportsVNIsInUse(t *testing.T) {
	ec := runController(t, controller.Config{})
	api := &renewRecorder{ControllerClient: ec.API()}
	inUse := func(context.Context) ([]uint16, error) { return []uint16{1024, 4000}, nil }
	c, err := New(api, Options{Node: "n1", InUseVNIs: func(ctx context.Context) ([]uint16, error) { return inUse(ctx) },
		Retry: backoff.Policy{Attempts: 50, Initial: time.Millisecond, Wait: backoff.Sleep}})
	if err != nil {
		t.Fatal(err)
	}
	runClient(t, c)
	ctx := t.Context()
	if _, err := c.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p", UID: "u"}); err != nil {
		t.Fatal(err) // the state is loaded from here on
	}
	for _, tc := range []struct {
		name         string
		inUse        func(context.Context) ([]uint16, error)
		wantReported bool
		want         []uint32
	}{
		{"known", func(context.Context) ([]uint16, error) { return []uint16{1024, 4000}, nil }, true, []uint32{1024, 4000}},
		{"none", func(context.Context) ([]uint16, error) { return nil, nil }, true, nil},
		{"unknown", func(context.Context) ([]uint16, error) { return nil, errors.New("driver list failed") }, false, nil},
	} {
		inUse = tc.inUse
		if err := c.Heartbeat(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := api.last.Load()
		if got.GetVnisReported() != tc.wantReported || !slices.Equal(got.GetInUseVnis(), tc.want) {
			t.Errorf("%s: reported %v %v, want %v %v", tc.name, got.GetVnisReported(), got.GetInUseVnis(), tc.wantReported, tc.want)
		}
	}
}

package controllerclient

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ipControllerConfig has a pod VNI pool and two IP pools: hsn0 of four
// /24 slices and an IPv6 one.
func ipControllerConfig() controller.Config {
	return controller.Config{
		PodVNIRange: vnialloc.Range{Min: 2048, Max: 2175}, PodVNISliceSize: 64,
		IPPools: []slices.PoolSpec{
			{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/22"), SliceSize: 24},
			{Name: "hsn1", Prefix: netip.MustParsePrefix("fd00:1::/48"), SliceSize: 64},
		},
	}
}

// newNodeClient returns a client of node over api that waits out the
// controller's load (it is not run: tests drive heartbeats themselves).
func newNodeClient(t *testing.T, api apiv1.ControllerClient, node string) *Client {
	t.Helper()
	c, err := New(api, Options{Node: node, Retry: backoff.Policy{Attempts: 50, Initial: time.Millisecond, Wait: backoff.Sleep}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIPPools(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	c := newNodeClient(t, ec.API(), "node-a")
	pools, err := c.IPPools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []IPPool{{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/22"), SliceBits: 24},
		{Name: "hsn1", Prefix: netip.MustParsePrefix("fd00:1::/48"), SliceBits: 64}}
	if fmt.Sprint(pools) != fmt.Sprint(want) {
		t.Fatalf("IPPools = %v, want %v (no pod-vni)", pools, want)
	}
}

// poolsAPI answers ListSlices with fixed pools.
type poolsAPI struct {
	apiv1.ControllerClient
	pools []*apiv1.Pool
}

func (p poolsAPI) ListSlices(context.Context, *apiv1.ListSlicesRequest, ...grpc.CallOption) (*apiv1.ListSlicesResponse, error) {
	return &apiv1.ListSlicesResponse{Pools: p.pools}, nil
}

// A spec that does not parse, or names another pool, is an error naming
// the pool, never a pool made up.
func TestIPPoolsBadSpec(t *testing.T) {
	for _, tc := range []struct{ name, spec string }{
		{"hsn0", "hsn0=10.150.0.0/16"},
		{"hsn0", "hsn0=10.150.0.1/16/24"},
		{"hsn0", "hsn9=10.150.0.0/16/24"},
		{"hsn0", ""},
	} {
		c := newNodeClient(t, poolsAPI{pools: []*apiv1.Pool{{Name: tc.name, Spec: tc.spec}}}, "node-a")
		if pools, err := c.IPPools(t.Context()); err == nil || len(pools) != 0 {
			t.Errorf("spec %q: %v %v, want an error", tc.spec, pools, err)
		} else if want := `pool "hsn0"`; !strings.Contains(err.Error(), want) {
			t.Errorf("spec %q: %v does not name the pool", tc.spec, err)
		}
	}
}

func TestAcquireIPSlices(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	a := newNodeClient(t, ec.API(), "node-a")
	b := newNodeClient(t, ec.API(), "node-b")
	ctx := t.Context()
	tests := []struct {
		name   string
		c      *Client
		pool   string
		count  int
		want   int   // slices held after
		is     error // the error matched
		naming string
	}{
		{name: "two", c: a, pool: "hsn0", count: 2, want: 2},
		{name: "idempotent", c: a, pool: "hsn0", count: 2, want: 2},
		{name: "other node", c: b, pool: "hsn0", count: 2, want: 2},
		{name: "pool full", c: b, pool: "hsn0", count: 3, is: ErrExhausted, naming: "hsn0"},
		{name: "v6", c: a, pool: "hsn1", count: 1, want: 1},
		{name: "no such pool", c: a, pool: "hsn9", count: 1, is: ErrInvalidArgument, naming: "hsn9"},
		{name: "vni pool", c: a, pool: slices.PodVNIPool, count: 1, is: ErrInvalidArgument},
		{name: "count 0", c: a, pool: "hsn0", count: 0, is: ErrInvalidArgument},
		{name: "count 65", c: a, pool: "hsn0", count: 65, is: ErrInvalidArgument},
	}
	for _, tc := range tests {
		got, err := tc.c.AcquireIPSlices(ctx, tc.pool, tc.count)
		if !errors.Is(err, tc.is) || (err == nil && len(got) != tc.want) {
			t.Fatalf("%s: %v %v; want %d slices, error %v", tc.name, got, err, tc.want, tc.is)
		}
		if err != nil && !strings.Contains(err.Error(), "ip pool "+tc.naming) {
			t.Fatalf("%s: %v does not name the pool", tc.name, err)
		}
		for _, s := range got {
			if s.Pool != tc.pool || !s.Prefix.IsValid() || s.Expires.IsZero() {
				t.Fatalf("%s: slice %+v", tc.name, s)
			}
		}
	}
}

func TestAcquireIPSliceAt(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	a := newNodeClient(t, ec.API(), "node-a")
	b := newNodeClient(t, ec.API(), "node-b")
	ctx := t.Context()
	got, err := b.AcquireIPSliceAt(ctx, "hsn0", 2)
	if err != nil || len(got) != 1 || got[0].Prefix != netip.MustParsePrefix("10.150.2.0/24") || got[0].Index != 2 {
		t.Fatalf("node-b at 2: %+v %v", got, err)
	}
	if again, err := b.AcquireIPSliceAt(ctx, "hsn0", 2); err != nil || len(again) != 1 {
		t.Fatalf("node-b at 2 again: %+v %v", again, err)
	}
	_, err = a.AcquireIPSliceAt(ctx, "hsn0", 2)
	var taken *SliceTakenError
	if !errors.As(err, &taken) || !errors.Is(err, ErrSliceTaken) {
		t.Fatalf("node-a at node-b's slice: %v", err)
	}
	if taken.Pool != "hsn0" || taken.Index != 2 || taken.Node != "node-b" || taken.Prefix != netip.MustParsePrefix("10.150.2.0/24") {
		t.Fatalf("SliceTakenError %+v", taken)
	}
	for _, i := range []int{4, -1, 1 << 21} {
		if _, err := a.AcquireIPSliceAt(ctx, "hsn0", i); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("index %d: %v", i, err)
		}
	}
	// node-a's next-fit slices leave node-b's alone.
	held, err := a.AcquireIPSlices(ctx, "hsn0", 3)
	if err != nil || len(held) != 3 {
		t.Fatalf("node-a: %+v %v", held, err)
	}
	for _, s := range held {
		if s.Index == 2 {
			t.Fatalf("node-a got node-b's slice: %+v", held)
		}
	}
}

// failingRelease answers ReleaseSlice with err, applying nothing.
type failingRelease struct {
	apiv1.ControllerClient
	err error
}

func (f failingRelease) ReleaseSlice(context.Context, *apiv1.ReleaseSliceRequest, ...grpc.CallOption) (*apiv1.ReleaseSliceResponse, error) {
	return nil, f.err
}

func TestReleaseIPSlice(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	a := newNodeClient(t, ec.API(), "node-a")
	ctx := t.Context()
	if _, err := a.AcquireIPSliceAt(ctx, "hsn0", 1); err != nil {
		t.Fatal(err)
	}
	quick := backoff.Policy{Attempts: 2, Wait: noWait}
	tests := []struct {
		name    string
		api     apiv1.ControllerClient
		pool    string
		index   int
		refused bool // matches ErrReleaseRefused; else nil unless unknown
		unknown bool
	}{
		{name: "held", api: ec.API(), pool: "hsn0", index: 1},
		{name: "not held any more", api: ec.API(), pool: "hsn0", index: 1},
		{name: "never held", api: ec.API(), pool: "hsn0", index: 3},
		{name: "no such pool", api: ec.API(), pool: "hsn9", index: 1, refused: true},
		{name: "negative index", api: ec.API(), pool: "hsn0", index: -1, refused: true},
		{name: "denied", api: failingRelease{ec.API(), status.Error(codes.PermissionDenied, "wrong node")}, pool: "hsn0", index: 1, refused: true},
		{name: "controller down", api: failingRelease{ec.API(), status.Error(codes.Unavailable, "down")}, pool: "hsn0", index: 1, unknown: true},
		{name: "commit failed", api: failingRelease{ec.API(), status.Error(codes.Internal, "disk full")}, pool: "hsn0", index: 1, unknown: true},
	}
	for _, tc := range tests {
		c, err := New(tc.api, Options{Node: "node-a", Retry: quick})
		if err != nil {
			t.Fatal(err)
		}
		err = c.ReleaseIPSlice(ctx, tc.pool, tc.index)
		switch {
		case tc.refused && !errors.Is(err, ErrReleaseRefused):
			t.Errorf("%s: %v, want ErrReleaseRefused", tc.name, err)
		case tc.unknown && (err == nil || errors.Is(err, ErrReleaseRefused)):
			t.Errorf("%s: %v, want an outcome-unknown error", tc.name, err)
		case !tc.refused && !tc.unknown && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
	}
	// The released slice is free for another node.
	if _, err := newNodeClient(t, ec.API(), "node-b").AcquireIPSliceAt(ctx, "hsn0", 1); err != nil {
		t.Fatal(err)
	}
}

// recordingHolder is a SliceHolder with fixed reports that records what
// each heartbeat hands it.
type recordingHolder struct {
	mu      sync.Mutex
	reports []SliceReport
	answers []heldAnswer
}

type heldAnswer struct {
	held []IPSlice
	lost []SliceReport
}

func (h *recordingHolder) SliceReports() []SliceReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]SliceReport(nil), h.reports...)
}

func (h *recordingHolder) SlicesHeld(held []IPSlice, lost []SliceReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers = append(h.answers, heldAnswer{held, lost})
}

func (h *recordingHolder) last(t *testing.T) heldAnswer {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.answers) == 0 {
		t.Fatal("SlicesHeld not called")
	}
	return h.answers[len(h.answers)-1]
}

// The holder's reports reach the controller with each heartbeat, open and
// allocated per slice, beside the pod VNI pool's (open where it hands out
// VNIs); the answer hands it every IP slice the node holds and its
// reported slices it does not hold.
func TestHeartbeatCarriesSliceHolder(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	c := newNodeClient(t, ec.API(), "node-a")
	ctx := t.Context()
	if _, err := c.AcquireIPSlices(ctx, "hsn0", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireIPSlices(ctx, "hsn1", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.acquirePodSlices(ctx, 1); err != nil {
		t.Fatal(err)
	}
	h := &recordingHolder{reports: []SliceReport{
		{Pool: "hsn0", Index: 0, Allocated: 5, Open: true},
		{Pool: "hsn0", Index: 1},
		{Pool: "hsn0", Index: 3, Allocated: 1, Open: true}, // not held
		{Pool: slices.PodVNIPool, Index: 0, Allocated: 99}, // not the holder's to report
		{Pool: "hsn0", Index: -1},
		{Pool: "hsn0", Index: 1<<20 + 1}, // the controller would refuse the whole heartbeat
		{Pool: "hsn0", Index: 2, Allocated: 1<<30 + 1},
	}}
	c.SetSliceHolder(h)
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	a := h.last(t)
	if len(a.held) != 3 || len(a.lost) != 1 || a.lost[0] != h.reports[2] {
		t.Fatalf("SlicesHeld(%+v, %+v); want 3 held (hsn0 and hsn1, no pod-vni) and hsn0/3 lost", a.held, a.lost)
	}
	for _, s := range a.held {
		if s.Pool == slices.PodVNIPool || !s.Prefix.IsValid() {
			t.Fatalf("held %+v", s)
		}
	}
	ls, err := ec.API().ListSlices(ctx, &apiv1.ListSlicesRequest{Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range ls.GetSlices() {
		got[fmt.Sprintf("%s/%d", s.GetPool(), s.GetIndex())] = fmt.Sprintf("open=%v allocated=%d", s.GetOpen(), s.GetAllocated())
	}
	want := map[string]string{"hsn0/0": "open=true allocated=5", "hsn0/1": "open=false allocated=0",
		"hsn1/0": "open=true allocated=0", "pod-vni/0": "open=true allocated=0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("controller's slices %v, want %v", got, want)
	}
}

// blockingRenew holds RenewSlices's answer until release is closed.
type blockingRenew struct {
	apiv1.ControllerClient
	sent    chan struct{}
	release chan struct{}
}

func (b *blockingRenew) RenewSlices(ctx context.Context, in *apiv1.RenewSlicesRequest, o ...grpc.CallOption) (*apiv1.RenewSlicesResponse, error) {
	resp, err := b.ControllerClient.RenewSlices(ctx, in, o...)
	close(b.sent)
	<-b.release
	return resp, err
}

// An answer that an IP slice release overtook is not handed to the
// holder: it still lists the slice the node has just given back, and the
// holder would take it up again. The next heartbeat's answer is.
func TestHeartbeatAnswerOlderThanReleaseNotHandedOn(t *testing.T) {
	ec := runController(t, ipControllerConfig())
	api := &blockingRenew{ControllerClient: ec.API(), sent: make(chan struct{}), release: make(chan struct{})}
	c := newNodeClient(t, api, "node-a")
	ctx := t.Context()
	if _, err := c.AcquireIPSlices(ctx, "hsn0", 2); err != nil {
		t.Fatal(err)
	}
	h := &recordingHolder{reports: []SliceReport{{Pool: "hsn0", Index: 0, Open: true}, {Pool: "hsn0", Index: 1}}}
	c.SetSliceHolder(h)
	beat := make(chan error, 1)
	go func() { beat <- c.Heartbeat(ctx) }()
	<-api.sent // the controller has answered: both slices held
	if err := c.ReleaseIPSlice(ctx, "hsn0", 1); err != nil {
		t.Fatal(err)
	}
	close(api.release)
	if err := <-beat; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	n := len(h.answers)
	h.mu.Unlock()
	if n != 0 {
		t.Fatalf("the answer from before the release was handed on: %+v", h.answers)
	}
	api.sent = make(chan struct{})
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if a := h.last(t); len(a.held) != 1 || a.held[0].Index != 0 || len(a.lost) != 1 || a.lost[0].Index != 1 {
		t.Fatalf("next answer: %+v", a)
	}
}

// The pod's network request reaches the node's lease.
func TestLeaseCarriesNetworkRequest(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := controllertest.NewJobs()
	jobs.Add("w-0", controllertest.Job("a", "train"))
	jobs.Add("w-1", controllertest.Job("a", "train"))
	jobs.SetNetworkRequest("a", "w-0", `{"pool":"hsn0","ip":"10.150.1.9"}`)
	svc, _ := controllertest.Start(t, st, jobs, controller.Config{})
	c := newNodeClient(t, grpcapi.NewLocalClient(grpcapi.NewServer(svc, time.Minute)), "node-a")
	for pod, want := range map[string]string{"w-0": `{"pool":"hsn0","ip":"10.150.1.9"}`, "w-1": ""} {
		l, err := c.AcquireJobVNI(t.Context(), PodRef{Namespace: "a", Name: pod})
		if err != nil || l.NetworkRequest != want || l.Scope != ScopeJob {
			t.Fatalf("%s: %+v %v; want network request %q", pod, l, err, want)
		}
	}
}

func TestSliceTakenFromStatus(t *testing.T) {
	withInfo := func(meta map[string]string) error {
		st, _ := status.New(codes.AlreadyExists, "taken").WithDetails(&errdetails.ErrorInfo{Reason: "SLICE_TAKEN", Domain: grpcapi.ErrorDomain, Metadata: meta})
		return st.Err()
	}
	tests := []struct {
		name string
		meta map[string]string
		want *SliceTakenError // nil: a plain *Error
	}{
		{"ip", map[string]string{"pool": "hsn0", "index": "7", "slice": "10.150.7.0/24", "node": "n2"},
			&SliceTakenError{Pool: "hsn0", Index: 7, Prefix: netip.MustParsePrefix("10.150.7.0/24"), Node: "n2"}},
		{"vni", map[string]string{"pool": "pod-vni", "index": "0", "slice": "2048-2111", "node": "n2"},
			&SliceTakenError{Pool: "pod-vni", Index: 0, Node: "n2"}},
		{"no node", map[string]string{"pool": "hsn0", "index": "7"}, nil},
		{"bad index", map[string]string{"pool": "hsn0", "index": "-7", "node": "n2"}, nil},
	}
	for _, tc := range tests {
		err := fromStatus(withInfo(tc.meta))
		if !errors.Is(err, ErrSliceTaken) {
			t.Errorf("%s: %v does not match ErrSliceTaken", tc.name, err)
		}
		var taken *SliceTakenError
		if got := errors.As(err, &taken); got != (tc.want != nil) {
			t.Errorf("%s: %#v", tc.name, err)
			continue
		}
		if tc.want != nil && (taken.Pool != tc.want.Pool || taken.Index != tc.want.Index || taken.Prefix != tc.want.Prefix || taken.Node != tc.want.Node) {
			t.Errorf("%s: %+v, want %+v", tc.name, taken, tc.want)
		}
	}
}

package controllerclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeSlices is a controller's lease table of one pod VNI pool: count
// slices of size VNIs from first. Its ReleaseSlice is under the test's
// control, so that a test can act while a give-back is in flight and
// decide whether the controller applied it and what the node is answered.
// Other methods of the API are not called by these tests.
type fakeSlices struct {
	apiv1.ControllerClient
	first, size, count int

	mu     sync.Mutex
	leases map[int]string // slice index → node
	// open is the open flag of each leased slice as the controller last
	// heard it: set at the lease, then as the node's heartbeats report.
	open map[int]bool
	// release decides one ReleaseSlice attempt; nil applies it and
	// answers success. It runs outside mu, as the node's other work would
	// run while the call is on the wire.
	release func(in *apiv1.ReleaseSliceRequest) (apply bool, err error)
	// renewErr, when set, fails RenewSlices.
	renewErr error
}

func newFakeSlices(first, size, count int) *fakeSlices {
	return &fakeSlices{first: first, size: size, count: count, leases: map[int]string{}, open: map[int]bool{}}
}

func (f *fakeSlices) rangeOf(i int) (first, last int) {
	return f.first + i*f.size, f.first + (i+1)*f.size - 1
}

func (f *fakeSlices) heldLocked(node string) []*apiv1.Slice {
	var out []*apiv1.Slice
	for i := range f.count {
		if f.leases[i] == node {
			a, b := f.rangeOf(i)
			out = append(out, &apiv1.Slice{Pool: slices.PodVNIPool, Index: uint32(i), Node: node, VniFirst: uint32(a), VniLast: uint32(b)})
		}
	}
	return out
}

func (f *fakeSlices) AcquireSlices(_ context.Context, in *apiv1.AcquireSlicesRequest, _ ...grpc.CallOption) (*apiv1.NodeSlices, error) {
	if in.GetPool() != slices.PodVNIPool {
		return nil, status.Error(codes.InvalidArgument, "no such pool")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	held := len(f.heldLocked(in.GetNode()))
	for i := 0; i < f.count && held < int(in.GetCount()); i++ {
		if f.leases[i] == "" {
			f.leases[i] = in.GetNode()
			f.open[i] = true
			held++
		}
	}
	if held < int(in.GetCount()) {
		return nil, status.Error(codes.ResourceExhausted, "pool full")
	}
	return &apiv1.NodeSlices{Slices: f.heldLocked(in.GetNode())}, nil
}

func (f *fakeSlices) RenewSlices(_ context.Context, in *apiv1.RenewSlicesRequest, _ ...grpc.CallOption) (*apiv1.RenewSlicesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewErr != nil {
		return nil, f.renewErr
	}
	for _, u := range in.GetUsage() {
		if i := int(u.GetIndex()); u.GetPool() == slices.PodVNIPool && f.leases[i] == in.GetNode() {
			f.open[i] = u.GetOpen()
		}
	}
	return &apiv1.RenewSlicesResponse{Held: f.heldLocked(in.GetNode())}, nil
}

func (f *fakeSlices) ReleaseSlice(_ context.Context, in *apiv1.ReleaseSliceRequest, _ ...grpc.CallOption) (*apiv1.ReleaseSliceResponse, error) {
	apply, err := true, error(nil)
	if f.release != nil {
		apply, err = f.release(in)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if apply {
		i := int(in.GetIndex())
		if f.leases[i] != in.GetNode() {
			return nil, status.Error(codes.NotFound, "slice not leased to this node")
		}
		delete(f.leases, i)
		delete(f.open, i)
	}
	return &apiv1.ReleaseSliceResponse{}, err
}

// grab leases every free slice to node, as the controller does for
// another node that needs VNIs: a slice it considers released is at once
// somebody else's.
func (f *fakeSlices) grab(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.count {
		if f.leases[i] == "" {
			f.leases[i] = node
			f.open[i] = true
		}
	}
}

// drop gives back one slice of node, the lowest-indexed one after skip others.
func (f *fakeSlices) drop(node string, skip int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.heldLocked(node)
	if len(held) > 0 {
		i := int(held[skip%len(held)].GetIndex())
		delete(f.leases, i)
		delete(f.open, i)
	}
}

// handedOut is what the node's pods use: the VNIs PodVNI returned and
// ReturnPodVNI has not taken back.
type handedOut map[uint16]bool

// check is the invariant: every VNI handed out lies in a slice the
// controller leases to node (none in a slice it considers released, or
// leased to another node) and last heard open (issue 17: else a node that
// went silent would lose the slice with the VNI in use).
func (f *fakeSlices) check(node string, out handedOut) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var bad []string
	for v := range out {
		i := (int(v) - f.first) / f.size
		if int(v) < f.first || i >= f.count || f.leases[i] != node || !f.open[i] {
			bad = append(bad, fmt.Sprintf("%d (slice %d, leased to %q, open %v)", v, i, f.leases[i], f.open[i]))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return fmt.Errorf("VNIs in use on %s outside the slices the controller leases it and last heard open: %v", node, bad)
	}
	return nil
}

// take hands out a VNI from the local pool with no waiting; a VNI handed
// out twice is an error.
func take(ctx context.Context, c *Client, out handedOut) error {
	v, err := c.PodVNI(ctx)
	if err != nil {
		return nil // the pool is empty: nothing handed out
	}
	if out[v] {
		return fmt.Errorf("VNI %d handed out twice", v)
	}
	out[v] = true
	return nil
}

// doneContext is a context that has ended: PodVNI with it takes a free
// VNI if there is one and never waits for a refill.
func doneContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func newGiveBackClient(t *testing.T, api apiv1.ControllerClient, lowWater int) *Client {
	t.Helper()
	c, err := New(api, Options{Node: "n1", LowWater: lowWater, Retry: backoff.Policy{Attempts: 2, Wait: noWait}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 15, item 2: while the node gives a slice back, a PreStart takes
// VNIs from the pool. None of them may come from the slice on its way back,
// which the controller then leases to another node.
func TestItem2SliceGiveBackNeverReturnsATakenVNI(t *testing.T) {
	for _, tc := range []struct {
		name string
		// apply: the controller released the slice; answer: what the node
		// was told.
		apply  bool
		answer error
		// wantAfter: VNIs handed out in all, once the pool is drained
		// after the next tick: the returned slice's too only when the
		// controller certainly kept it leased to the node.
		wantAfter int
	}{
		{"released", true, nil, 4},
		{"released, answer lost", true, status.Error(codes.Internal, "commit: disk full"), 4},
		{"not released, controller down", false, status.Error(codes.Unavailable, "connection refused"), 4},
		{"refused", false, status.Error(codes.PermissionDenied, "denied"), 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSlices(2048, 4, 3)
			f.leases[0], f.leases[1] = "n1", "n1"
			c := newGiveBackClient(t, f, 1) // keep 2 free: one of the two slices may go back
			if err := c.Heartbeat(t.Context()); err != nil {
				t.Fatal(err)
			}
			inFlight, answer := make(chan struct{}), make(chan struct{})
			f.release = func(*apiv1.ReleaseSliceRequest) (bool, error) {
				close(inFlight)
				<-answer
				f.release = func(*apiv1.ReleaseSliceRequest) (bool, error) { return tc.apply, tc.answer }
				return tc.apply, tc.answer
			}
			ticked := make(chan struct{})
			go func() {
				defer close(ticked)
				c.tick(t.Context())
			}()
			<-inFlight
			out := handedOut{}
			for range 8 { // PreStarts while the slice is on its way back
				if err := take(doneContext(t), c, out); err != nil {
					t.Fatal(err)
				}
			}
			close(answer)
			<-ticked
			f.grab("n2")
			if err := f.check("n1", out); err != nil {
				t.Fatal(err)
			}
			if len(out) != 4 {
				t.Fatalf("%d VNIs handed out, want the 4 of the slice that stays", len(out))
			}
			// Unless the controller refused, the slice's VNIs stay out of
			// the pool, however the next tick goes.
			c.tick(t.Context())
			for range 8 {
				if err := take(doneContext(t), c, out); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.check("n1", out); err != nil {
				t.Fatalf("after the next tick: %v", err)
			}
			if len(out) != tc.wantAfter {
				t.Fatalf("after the next tick: %d VNIs handed out, want %d", len(out), tc.wantAfter)
			}
		})
	}
}

// interleaving drives one client against fakeSlices with random steps and
// checks the invariants after each.
type interleaving struct {
	t   *testing.T
	rng *rand.Rand
	f   *fakeSlices
	c   *Client
	out handedOut
	log []string
	// releases counts ReleaseSlice attempts, inFlight the steps taken while
	// one was on the wire.
	releases, inFlight int
}

func (s *interleaving) step(depth int) error {
	ctx := s.t.Context()
	n := s.rng.IntN(100)
	if depth > 0 && n >= 55 && n < 75 {
		n += 20 // no tick inside a tick: the client runs one at a time
	}
	switch {
	case n < 30:
		s.log = append(s.log, "take")
		if err := take(doneContext(s.t), s.c, s.out); err != nil {
			return err
		}
	case n < 55:
		if v, ok := s.any(); ok {
			s.log = append(s.log, fmt.Sprintf("put %d", v))
			delete(s.out, v)
			s.c.ReturnPodVNI(v)
		}
	case n < 75:
		s.log = append(s.log, "tick")
		s.c.tick(ctx)
	case n < 80:
		// A heartbeat of an agent's own loop, beside Run's.
		s.log = append(s.log, "heartbeat")
		_ = s.c.Heartbeat(ctx) // fails when the test makes renewals fail
	case n < 85:
		s.log = append(s.log, "other node takes every free slice")
		s.f.grab("n2")
	default:
		s.log = append(s.log, "other node gives a slice back")
		s.f.drop("n2", s.rng.IntN(4))
	}
	return s.f.check("n1", s.out)
}

// any returns a handed-out VNI, chosen at random.
func (s *interleaving) any() (uint16, bool) {
	if len(s.out) == 0 {
		return 0, false
	}
	vs := make([]uint16, 0, len(s.out))
	for v := range s.out {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs[s.rng.IntN(len(vs))], true
}

// release is the controller's side of one ReleaseSlice attempt: a few
// steps happen while it is on the wire, then it is applied or not and
// answered with success or an error.
func (s *interleaving) release(*apiv1.ReleaseSliceRequest) (bool, error) {
	s.releases++
	for range s.rng.IntN(4) {
		s.inFlight++
		if err := s.step(1); err != nil {
			s.t.Errorf("while a release was in flight: %v", err)
		}
	}
	answers := []error{nil, status.Error(codes.Unavailable, "unreachable"), status.Error(codes.Internal, "commit failed"),
		status.Error(codes.PermissionDenied, "denied"), status.Error(codes.DeadlineExceeded, "timeout")}
	apply := s.rng.IntN(3) > 0
	answer := answers[s.rng.IntN(len(answers))]
	switch status.Code(answer) {
	case codes.OK:
		apply = true // a controller that says yes has done it
	case codes.PermissionDenied:
		apply = false // checked before the controller acts
	}
	s.log = append(s.log, fmt.Sprintf("release applied=%v answer=%v", apply, answer))
	return apply, answer
}

// Issue 15, item 2, under random interleavings of takes, puts, ticks
// (refills, give-backs and their retries), releases that fail before or
// after the controller applied them, and another node taking every slice
// it can: no VNI is handed out twice, and none lies in a slice the
// controller does not lease to the node.
func TestItem2SliceGiveBackInterleavings(t *testing.T) {
	releases, inFlight := 0, 0
	for seed := range uint64(32) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			f := newFakeSlices(2048, 4, 8)
			s := &interleaving{t: t, rng: rand.New(rand.NewPCG(seed, 15)), f: f, out: handedOut{}}
			s.c = newGiveBackClient(t, f, 1+int(seed%3))
			f.release = s.release
			for i := range 1500 {
				f.mu.Lock()
				f.renewErr = nil
				if s.rng.IntN(8) == 0 {
					f.renewErr = errors.New("renew: controller restarting")
				}
				f.mu.Unlock()
				if err := s.step(0); err != nil {
					t.Fatalf("step %d: %v\nlast steps: %v", i, err, s.log[max(0, len(s.log)-12):])
				}
				if t.Failed() {
					t.Fatalf("step %d\nlast steps: %v", i, s.log[max(0, len(s.log)-12):])
				}
			}
			releases, inFlight = releases+s.releases, inFlight+s.inFlight
		})
	}
	t.Logf("%d release attempts, %d steps while one was in flight", releases, inFlight)
	if releases < 150 || inFlight < 150 {
		t.Fatalf("%d release attempts, %d steps while one was in flight: too few to test anything", releases, inFlight)
	}
}

// Issue 17: a slice the node reported closed (to give it back) is not
// handed out from again, after the controller refused the give-back,
// before a heartbeat has reported it open and been answered: until then
// the controller would reclaim it if the node went silent.
func TestRefusedGiveBackReopensAfterReport(t *testing.T) {
	f := newFakeSlices(2048, 4, 3)
	c := newGiveBackClient(t, f, 1)
	ctx := t.Context()
	if err := c.acquirePodSlices(ctx, 2); err != nil {
		t.Fatal(err)
	}
	f.release = func(*apiv1.ReleaseSliceRequest) (bool, error) {
		// The heartbeat before the give-back reported the slice closed.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.open[1] {
			t.Error("slice 1 given back while the controller heard it open")
		}
		return false, status.Error(codes.PermissionDenied, "denied")
	}
	i, gb, ok := c.pool.beginGiveBack(2)
	if !ok || i != 1 {
		t.Fatalf("beginGiveBack: %d %v", i, ok)
	}
	if err := c.Heartbeat(ctx); err != nil { // reports slice 1 closed
		t.Fatal(err)
	}
	c.giveBack(ctx, i, gb) // refused
	out := handedOut{}
	drain := func() {
		for range 8 {
			if err := take(doneContext(t), c, out); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.check("n1", out); err != nil {
			t.Fatal(err)
		}
	}
	drain()
	if len(out) != 4 {
		t.Fatalf("%d VNIs handed out before the reopening report, want slice 0's 4", len(out))
	}
	f.renewErr = errors.New("controller restarting")
	if err := c.Heartbeat(ctx); err == nil {
		t.Fatal("heartbeat did not fail")
	}
	drain()
	if len(out) != 4 {
		t.Fatalf("%d VNIs handed out after a failed heartbeat, want 4", len(out))
	}
	f.renewErr = nil
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	drain()
	if len(out) != 8 || !f.open[1] {
		t.Fatalf("%d VNIs handed out after the reopening report (open %v), want 8", len(out), f.open[1])
	}
}

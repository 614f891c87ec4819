package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/internal/controllertest"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/controller"
	ctlslices "github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// These tests join the real pieces of the node's addresses: a controller
// (sqlite store, group commit) served over gRPC on loopback, one
// controllerclient per node, and per node an ipam.Allocator whose Slicer is
// ipSlicer over that client and whose reports ride the client's
// heartbeats through sliceHolder.

// ipsClock is the controller's clock; only the test moves it.
type ipsClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *ipsClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *ipsClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ipsController is a real controller with IP pools on loopback gRPC. Its
// own sweep loop never fires: tests sweep explicitly.
type ipsController struct {
	svc   *controller.Allocator
	addr  string
	clock *ipsClock
	cfg   controller.Config
}

// newIPSController serves a controller with the pools (as --ip-pools
// spells them), a slice TTL of a minute and a grace of five.
func newIPSController(t *testing.T, pools ...string) *ipsController {
	t.Helper()
	clock := &ipsClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	cfg := controller.Config{Now: clock.Now, SliceTTL: time.Minute, SliceGrace: 5 * time.Minute, SweepInterval: 24 * time.Hour}
	for _, p := range pools {
		spec, err := ctlslices.ParsePool(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg.IPPools = append(cfg.IPPools, spec)
	}
	svc, addr := controllertest.Serve(t, cfg)
	return &ipsController{svc: svc, addr: addr, clock: clock, cfg: cfg}
}

// held returns the slices of pool the controller leases to node, by index.
func (h *ipsController) held(t *testing.T, pool, node string) map[int]controller.Slice {
	t.Helper()
	got, _, err := h.svc.ListSlices(pool, node)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]controller.Slice{}
	for _, s := range got {
		if s.Node != node {
			t.Fatalf("ListSlices(%s, %s) answered %+v", pool, node, s)
		}
		out[s.Index] = s
	}
	return out
}

// ipsSlicer is ipSlicer as the allocator's Slicer, with a hook after the
// first successful Pools call once armed: learnPools uses it to end Run
// right after the allocator has learnt the pools, before it leases.
type ipsSlicer struct {
	ipSlicer
	mu      sync.Mutex
	learned func()
}

func (s *ipsSlicer) Pools(ctx context.Context) ([]ipam.Pool, error) {
	pools, err := s.ipSlicer.Pools(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.learned != nil {
		s.learned()
		s.learned = nil
	}
	return pools, err
}

// ipsNode is one node: its controller client, and its allocator over the
// client with its state file, its reports on the client's heartbeats.
type ipsNode struct {
	name   string
	client *controllerclient.Client
	slicer *ipsSlicer
	alloc  *ipam.Allocator
}

// newNode dials the controller as node name and makes its allocator,
// which knows the pools and holds no slice yet. The client heartbeats
// only when the test calls Heartbeat or runs it.
func (h *ipsController) newNode(t *testing.T, name string, lowWater int) *ipsNode {
	t.Helper()
	c, err := controllerclient.Dial(h.addr, controllerclient.Options{Node: name, Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := &ipsSlicer{ipSlicer: ipSlicer{c}}
	a, err := ipam.New(ipam.Options{StatePath: filepath.Join(t.TempDir(), name+"-ipam.json"), Slicer: s,
		LowWater: lowWater, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.SetSliceHolder(sliceHolder{a: a})
	n := &ipsNode{name: name, client: c, slicer: s, alloc: a}
	n.learnPools(t)
	return n
}

// learnPools runs the allocator until it has asked the controller for
// its pools: the first pass of Run learns them and, its context ended by
// the hook, returns before leasing anything.
func (n *ipsNode) learnPools(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n.slicer.mu.Lock()
	n.slicer.learned = cancel
	n.slicer.mu.Unlock()
	if err := n.alloc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	snap := n.alloc.Inspect()
	if len(snap.Pools) == 0 {
		t.Fatalf("%s: the allocator did not learn the controller's pools", n.name)
	}
	for _, p := range snap.Pools {
		if len(p.Slices) != 0 {
			t.Fatalf("%s: learning the pools leased %+v", n.name, p.Slices)
		}
	}
}

func (n *ipsNode) allocate(ctx context.Context, owner string, want netreq.Request) (netip.Addr, error) {
	al, pfx, err := n.alloc.Allocate(ctx, ipam.Request{Owner: owner, Pool: "hsn0", Want: want})
	if err == nil && (pfx.Addr() != al.Address || !al.Address.IsValid()) {
		return al.Address, fmt.Errorf("allocation %+v answered with prefix %s", al, pfx)
	}
	return al.Address, err
}

func (n *ipsNode) heartbeat(t *testing.T) {
	t.Helper()
	if err := n.client.Heartbeat(t.Context()); err != nil {
		t.Fatalf("%s heartbeat: %v", n.name, err)
	}
}

// addresses returns the node's allocations of pool, owner to address, as
// its allocator records them.
func (n *ipsNode) addresses(pool string) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, al := range n.alloc.Inspect().Allocations {
		if al.Pool == pool {
			out[al.Owner] = al.Address
		}
	}
	return out
}

// slices returns the node's slices of pool as its allocator holds them.
func (n *ipsNode) slices(pool string) map[int]ipam.SliceInfo {
	out := map[int]ipam.SliceInfo{}
	for _, p := range n.alloc.Inspect().Pools {
		if p.Name == pool {
			for _, s := range p.Slices {
				out[s.Index] = s
			}
		}
	}
	return out
}

// ipsCheckAddresses checks what the nodes hold in pool against each other and
// against the controller, after a heartbeat of each has carried its
// reports: every node has exactly the addresses want says; no address is
// any two owners'; every address lies in a slice the controller leases to
// the owner's node, and the slice it reports to the controller counts it;
// the allocator uses no slice the controller does not lease to its node;
// and no slice, or part of one, is two nodes'.
func ipsCheckAddresses(t *testing.T, h *ipsController, pool string, nodes []*ipsNode, want map[string]map[string]netip.Addr) {
	t.Helper()
	owners := map[netip.Addr]string{}
	var leased []controller.Slice
	for _, n := range nodes {
		n.heartbeat(t)
		got := n.addresses(pool)
		if len(got) != len(want[n.name]) {
			t.Errorf("%s records %d addresses, was handed %d", n.name, len(got), len(want[n.name]))
		}
		for o, a := range want[n.name] {
			if got[o] != a {
				t.Errorf("%s: owner %s was handed %s, the allocator records %s", n.name, o, a, got[o])
			}
		}
		held := h.held(t, pool, n.name)
		counted := map[int]int{}
		for o, a := range got {
			if prev, dup := owners[a]; dup {
				t.Errorf("address %s handed to both %s and %s/%s", a, prev, n.name, o)
			}
			owners[a] = n.name + "/" + o
			in := -1
			for i, s := range held {
				if s.Prefix.Contains(a) {
					in = i
				}
			}
			if in < 0 {
				t.Errorf("%s handed %s to %s outside every slice the controller leases it (%v)", n.name, a, o, held)
				continue
			}
			counted[in]++
		}
		for i, s := range held {
			if s.Allocated != counted[i] {
				t.Errorf("controller has %s's slice %d (%s) with %d addresses allocated, the node has %d", n.name, i, s.Prefix, s.Allocated, counted[i])
			}
			if counted[i] > 0 && !s.Open {
				t.Errorf("controller has %s's slice %d with addresses closed", n.name, i)
			}
			leased = append(leased, s)
		}
		for i, s := range n.slices(pool) {
			if c, ok := held[i]; !s.Returning && (!ok || c.Prefix != s.Prefix) {
				t.Errorf("%s allocates from slice %d (%s), which the controller does not lease it", n.name, i, s.Prefix)
			}
		}
	}
	for i, a := range leased {
		for _, b := range leased[i+1:] {
			if a.Index == b.Index || a.Prefix.Overlaps(b.Prefix) {
				t.Errorf("slices %+v and %+v overlap", a, b)
			}
		}
	}
}

// Two nodes on one controller allocate addresses concurrently, each with
// its allocator's upkeep and its heartbeats running, so that slices are
// leased on the slow path and ahead of need at once. Each needs more than
// one slice. No address is handed out twice, each lies in a slice the
// controller leases to its node, and the nodes' slices are disjoint; then
// again after a third of the addresses are released and as many more
// handed out.
func TestTwoAgentsGetDisjointSlices(t *testing.T) {
	h := newIPSController(t, "hsn0=10.150.0.0/16:/24")
	nodes := []*ipsNode{h.newNode(t, "node-a", 16), h.newNode(t, "node-b", 16)}
	const perNode, workers = 300, 6
	handed := map[string]map[string]netip.Addr{}
	for _, n := range nodes {
		handed[n.name] = map[string]netip.Addr{}
	}
	var mu sync.Mutex
	alloc := func(ctx context.Context, n *ipsNode, o string) error {
		a, err := n.allocate(ctx, o, netreq.Request{})
		if err != nil {
			return fmt.Errorf("%s: allocate %s: %w", n.name, o, err)
		}
		mu.Lock()
		defer mu.Unlock()
		handed[n.name][o] = a
		return nil
	}
	release := func(n *ipsNode, o string) error {
		if ok, err := n.alloc.Release(o); !ok || err != nil {
			return fmt.Errorf("%s: release %s: %v %w", n.name, o, ok, err)
		}
		mu.Lock()
		defer mu.Unlock()
		delete(handed[n.name], o)
		return nil
	}
	first := func(n *ipsNode, i int) string { return fmt.Sprintf("cni/%s-%03d/net1", n.name, i) }
	second := func(n *ipsNode, i int) string { return fmt.Sprintf("cni/%s-%03d/net2", n.name, i) }

	// phase runs the nodes' upkeep and heartbeats while workers of both
	// nodes run op for every i below perNode, then stops them.
	phase := func(op func(ctx context.Context, n *ipsNode, i int) error) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var runs, work sync.WaitGroup
		for _, n := range nodes {
			runs.Go(func() { _ = n.alloc.Run(ctx) })
			runs.Go(func() { _ = n.client.Run(ctx) })
		}
		for _, n := range nodes {
			for w := range workers {
				work.Go(func() {
					for i := w; i < perNode; i += workers {
						if err := op(ctx, n, i); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		work.Wait()
		cancel()
		runs.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	phase(func(ctx context.Context, n *ipsNode, i int) error { return alloc(ctx, n, first(n, i)) })
	for _, n := range nodes {
		if got := len(h.held(t, "hsn0", n.name)); got < 2 {
			t.Fatalf("%s holds %d slices for %d addresses; the test wants more than one", n.name, got, perNode)
		}
	}
	ipsCheckAddresses(t, h, "hsn0", nodes, handed)
	if t.Failed() {
		t.FailNow()
	}

	// Churn: a third of each node's owners go while as many new ones
	// arrive.
	phase(func(ctx context.Context, n *ipsNode, i int) error {
		if i%3 != 0 {
			return nil
		}
		if err := release(n, first(n, i)); err != nil {
			return err
		}
		return alloc(ctx, n, second(n, i))
	})
	ipsCheckAddresses(t, h, "hsn0", nodes, handed)

	// Asking again answers the same address.
	for _, n := range nodes {
		for o, a := range handed[n.name] {
			if got, err := n.allocate(t.Context(), o, netreq.Request{}); err != nil || got != a {
				t.Fatalf("%s: %s asks again: %s %v, was handed %s", n.name, o, got, err, a)
			}
		}
	}
}

// ipsFixedHolder is a SliceHolder with fixed reports.
type ipsFixedHolder []controllerclient.SliceReport

func (h ipsFixedHolder) SliceReports() []controllerclient.SliceReport { return h }

func (ipsFixedHolder) SlicesHeld([]controllerclient.IPSlice, []controllerclient.SliceReport) {}

// ipsNthAddr returns the address n past p's first.
func ipsNthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// Issue 17 end to end: node-a holds a slice with live addresses, some
// handed out after its last heartbeat, and goes silent for longer than
// the slice TTL and the grace period. The controller's sweep keeps the
// slice (it takes back a slice node-c last reported closed and empty, so
// the sweep did run); node-b can lease neither the slice nor any address
// in it, and cannot fill the pool past it; node-a's heartbeat comes back
// and renews it, and node-a still holds it and its addresses. No address
// is any two owners'.
func TestSliceWithLiveAddressesNeverReclaimed(t *testing.T) {
	h := newIPSController(t, "hsn0=10.150.0.0/22:/24") // four slices
	ctx := t.Context()
	a := h.newNode(t, "node-a", 4)
	aAddrs := map[string]netip.Addr{}
	allocA := func(i int) {
		t.Helper()
		o := fmt.Sprintf("cni/a-%02d/net1", i)
		addr, err := a.allocate(ctx, o, netreq.Request{})
		if err != nil {
			t.Fatal(err)
		}
		aAddrs[o] = addr
	}
	for i := range 10 {
		allocA(i)
	}
	a.heartbeat(t)
	for i := 10; i < 15; i++ { // after the last heartbeat
		allocA(i)
	}
	aSlices := a.slices("hsn0")
	if len(aSlices) != 1 {
		t.Fatalf("node-a holds %+v, want one slice", aSlices)
	}
	var idx int
	var aPrefix netip.Prefix
	for i, s := range aSlices {
		idx, aPrefix = i, s.Prefix
	}
	if s := h.held(t, "hsn0", "node-a")[idx]; s.Allocated != 10 || !s.Open || s.Prefix != aPrefix {
		t.Fatalf("controller has node-a's slice as %+v, want open with the 10 addresses of the last report", s)
	}

	// node-c leases a slice and reports it closed and empty, then goes
	// silent too.
	c, err := controllerclient.Dial(h.addr, controllerclient.Options{Node: "node-c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cs, err := c.AcquireIPSlices(ctx, "hsn0", 1)
	if err != nil || len(cs) != 1 || cs[0].Index == idx {
		t.Fatalf("node-c: %+v %v", cs, err)
	}
	cIdx, cPrefix := cs[0].Index, cs[0].Prefix
	c.SetSliceHolder(ipsFixedHolder{{Pool: "hsn0", Index: cIdx}})
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}

	h.clock.Advance(h.cfg.SliceTTL + h.cfg.SliceGrace + time.Second)
	if s := h.held(t, "hsn0", "node-a")[idx]; !h.clock.Now().After(s.Expires.Add(h.cfg.SliceGrace)) {
		t.Fatalf("node-a's slice %+v has not expired past the grace period at %v", s, h.clock.Now())
	}
	if err := h.svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if held := h.held(t, "hsn0", "node-c"); len(held) != 0 {
		t.Fatalf("the sweep left node-c's closed, empty slice: %+v", held)
	}
	if s, ok := h.held(t, "hsn0", "node-a")[idx]; !ok || s.Allocated != 10 || !s.Open {
		t.Fatalf("the sweep took node-a's slice with live addresses: %+v %v", s, ok)
	}

	b := h.newNode(t, "node-b", 4)
	bAddrs := map[string]netip.Addr{}
	allocB := func(o string, want netreq.Request) func() error {
		return func() error {
			addr, err := b.allocate(ctx, o, want)
			if err == nil {
				bAddrs[o] = addr
				if aPrefix.Contains(addr) {
					return fmt.Errorf("node-b handed out %s of node-a's slice %s", addr, aPrefix)
				}
			}
			return err
		}
	}
	free := ipsNthAddr(aPrefix, 200) // in node-a's slice, not handed out
	for _, tc := range []struct {
		name string
		ask  func() error
		// is: the error matched, nil for success; taken: the error says
		// the range is node-a's.
		is    error
		taken bool
	}{
		{name: "any address", ask: allocB("cni/b-00/net1", netreq.Request{})},
		{name: "slice at node-a's index", ask: func() error {
			got, err := b.slicer.AcquireAt(ctx, "hsn0", idx)
			if err == nil {
				return fmt.Errorf("leased %+v", got)
			}
			var st *ipam.SliceTakenError
			if !errors.As(err, &st) || st.Pool != "hsn0" || st.Index != idx || st.Node != "node-a" {
				return fmt.Errorf("want an *ipam.SliceTakenError naming node-a's slice %d: %w", idx, err)
			}
			return fmt.Errorf("%w: %w", ipam.ErrAddressTaken, err)
		}, is: ipam.ErrAddressTaken, taken: true},
		{name: "address node-a reported", ask: allocB("cni/b-01/net1", netreq.Request{IP: aAddrs["cni/a-00/net1"]}), is: ipam.ErrAddressTaken, taken: true},
		{name: "address node-a handed out silent", ask: allocB("cni/b-02/net1", netreq.Request{IP: aAddrs["cni/a-12/net1"]}), is: ipam.ErrAddressTaken, taken: true},
		{name: "free address of node-a's slice", ask: allocB("cni/b-03/net1", netreq.Request{IP: free}), is: ipam.ErrAddressTaken, taken: true},
		{name: "subnet of node-a's slice", ask: allocB("cni/b-04/net1", netreq.Request{Subnet: aPrefix}), is: ipam.ErrAddressTaken, taken: true},
		{name: "address of node-c's reclaimed slice", ask: allocB("cni/b-05/net1", netreq.Request{IP: ipsNthAddr(cPrefix, 7)})},
		{name: "every slice of the pool", ask: func() error {
			got, err := b.slicer.Acquire(ctx, "hsn0", 4)
			if err == nil {
				return fmt.Errorf("leased %+v", got)
			}
			return err
		}, is: ipam.ErrPoolFull},
	} {
		err := tc.ask()
		switch {
		case tc.is == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.is)
		case tc.taken && !strings.Contains(fmt.Sprint(err), "node-a"):
			t.Errorf("%s: %v does not name node-a", tc.name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if _, ok := h.held(t, "hsn0", "node-b")[idx]; ok {
		t.Fatal("node-b holds node-a's slice")
	}

	// node-a is back: its heartbeat renews the slice and reports the
	// addresses handed out while it was silent.
	a.heartbeat(t)
	s, ok := h.held(t, "hsn0", "node-a")[idx]
	if !ok || s.Allocated != 15 || !s.Open || !s.Expires.After(h.clock.Now()) {
		t.Fatalf("node-a back: controller has %+v %v, want its slice renewed, open, with 15 addresses", s, ok)
	}
	if as := a.slices("hsn0"); len(as) != 1 || as[idx].Returning || as[idx].Used != 15 {
		t.Fatalf("node-a back: its allocator holds %+v, want slice %d in use with 15 addresses", as, idx)
	}
	for o, addr := range aAddrs {
		if al, _, ok := a.alloc.Get(o); !ok || al.Address != addr {
			t.Fatalf("node-a back: %s has %+v %v, was handed %s", o, al, ok, addr)
		}
	}
	// The free address node-b was refused is node-a's to hand out.
	addr, err := a.allocate(ctx, "cni/a-15/net1", netreq.Request{IP: free})
	if err != nil {
		t.Fatalf("node-a back: %s of its own slice: %v", free, err)
	}
	aAddrs["cni/a-15/net1"] = addr
	if err := h.svc.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	ipsCheckAddresses(t, h, "hsn0", []*ipsNode{a, b}, map[string]map[string]netip.Addr{"node-a": aAddrs, "node-b": bAddrs})
}

// ipamError gives the allocator's sentinels to the controller's answers
// that mean them, and keeps the client's error in the chain: through
// ipSlicer directly, and through an allocator on it.
func TestIPAMErrorsMapped(t *testing.T) {
	h := newIPSController(t, "hsn0=10.150.0.0/22:/24", "tiny=10.151.0.0/27:/28")
	ctx := t.Context()
	a := h.newNode(t, "node-a", 1)
	b := h.newNode(t, "node-b", 1)
	// node-a leases all of tiny and slice 1 of hsn0.
	if _, err := a.client.AcquireIPSlices(ctx, "tiny", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.AcquireIPSliceAt(ctx, "hsn0", 1); err != nil {
		t.Fatal(err)
	}
	s := b.slicer.ipSlicer
	sliceErr := func(got []ipam.Slice, err error) error {
		if err == nil {
			return fmt.Errorf("no error but slices %+v", got)
		}
		return err
	}
	allocErr := func(req ipam.Request) error {
		al, _, err := b.alloc.Allocate(ctx, req)
		if err == nil {
			return fmt.Errorf("no error but %+v", al)
		}
		return err
	}
	mapped := []error{ipam.ErrPoolFull, ipam.ErrReleaseRefused, ipam.ErrAddressTaken}
	tests := []struct {
		name string
		err  error
		// is: the sentinels the error matches (of the allocator's and the
		// client's); the allocator's others must not match. taken: the
		// *ipam.SliceTakenError in its chain. naming: in its text.
		is     []error
		taken  *ipam.SliceTakenError
		naming string
	}{
		{name: "pool full", err: sliceErr(s.Acquire(ctx, "tiny", 1)),
			is: []error{ipam.ErrPoolFull, controllerclient.ErrExhausted}, naming: "tiny"},
		{name: "slice taken", err: sliceErr(s.AcquireAt(ctx, "hsn0", 1)),
			is: []error{controllerclient.ErrSliceTaken}, taken: &ipam.SliceTakenError{Pool: "hsn0", Index: 1, Node: "node-a"}, naming: "node-a"},
		{name: "full pool's slice taken", err: sliceErr(s.AcquireAt(ctx, "tiny", 0)),
			is: []error{controllerclient.ErrSliceTaken}, taken: &ipam.SliceTakenError{Pool: "tiny", Index: 0, Node: "node-a"}},
		{name: "release in no pool", err: s.Release(ctx, "hsn9", 0),
			is: []error{ipam.ErrReleaseRefused, controllerclient.ErrReleaseRefused, controllerclient.ErrInvalidArgument}, naming: "hsn9"},
		{name: "release of a bad index", err: s.Release(ctx, "hsn0", -1),
			is: []error{ipam.ErrReleaseRefused, controllerclient.ErrReleaseRefused}},
		{name: "acquire in no pool", err: sliceErr(s.Acquire(ctx, "hsn9", 1)),
			is: []error{controllerclient.ErrInvalidArgument}, naming: "hsn9"},
		{name: "slice past the pool", err: sliceErr(s.AcquireAt(ctx, "hsn0", 4)),
			is: []error{controllerclient.ErrInvalidArgument}},
		{name: "allocate in a full pool", err: allocErr(ipam.Request{Owner: "o1", Pool: "tiny"}),
			is: []error{ipam.ErrPoolFull}, naming: "pool tiny"},
		{name: "allocate in another node's slice", err: allocErr(ipam.Request{Owner: "o2", Pool: "hsn0", Want: netreq.Request{IP: netip.MustParseAddr("10.150.1.9")}}),
			is: []error{ipam.ErrAddressTaken}, naming: "node-a"},
	}
	for _, tc := range tests {
		for _, e := range mapped {
			if errors.Is(tc.err, e) && !slices.Contains(tc.is, e) {
				t.Errorf("%s: %v matches %v", tc.name, tc.err, e)
			}
		}
		for _, e := range tc.is {
			if !errors.Is(tc.err, e) {
				t.Errorf("%s: %v does not match %v", tc.name, tc.err, e)
			}
		}
		var taken *ipam.SliceTakenError
		if got := errors.As(tc.err, &taken); got != (tc.taken != nil) {
			t.Errorf("%s: %v: *ipam.SliceTakenError in the chain: %v", tc.name, tc.err, got)
		} else if got && *taken != *tc.taken {
			t.Errorf("%s: %+v, want %+v", tc.name, taken, tc.taken)
		}
		if !strings.Contains(fmt.Sprint(tc.err), tc.naming) {
			t.Errorf("%s: %v does not name %s", tc.name, tc.err, tc.naming)
		}
	}

	// What succeeds is no error, and the slices come through as the
	// controller leases them.
	for _, tc := range []struct {
		name string
		call func() ([]ipam.Slice, error)
		want []int
	}{
		{"acquire", func() ([]ipam.Slice, error) { return s.Acquire(ctx, "hsn0", 1) }, nil},
		{"acquire at", func() ([]ipam.Slice, error) { return s.AcquireAt(ctx, "hsn0", 3) }, []int{3}},
	} {
		got, err := tc.call()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		held := h.held(t, "hsn0", "node-b")
		if len(got) != len(held) {
			t.Fatalf("%s: %+v, controller leases %+v", tc.name, got, held)
		}
		for _, sl := range got {
			if c, ok := held[sl.Index]; !ok || sl.Pool != "hsn0" || sl.Prefix != c.Prefix {
				t.Fatalf("%s: slice %+v, controller leases %+v", tc.name, sl, held)
			}
		}
		for _, i := range tc.want {
			if _, ok := held[i]; !ok {
				t.Fatalf("%s: slice %d not leased: %+v", tc.name, i, held)
			}
		}
	}
	if err := s.Release(ctx, "hsn0", 1); err != nil { // node-a's: not node-b's to give back
		t.Fatalf("release of a slice node-b does not hold: %v", err)
	}
	if err := s.Release(ctx, "hsn0", 3); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, ok := h.held(t, "hsn0", "node-a")[1]; !ok {
		t.Fatal("node-b's release took node-a's slice")
	}
	if _, ok := h.held(t, "hsn0", "node-b")[3]; ok {
		t.Fatal("release left the slice leased")
	}
	pools, err := s.Pools(ctx)
	if want := "[{hsn0 10.150.0.0/22 24} {tiny 10.151.0.0/27 28}]"; err != nil || fmt.Sprint(pools) != want {
		t.Fatalf("Pools = %v %v, want %s", pools, err, want)
	}
}

// ipsHookSlicer pauses after an AcquireAt or a Release has been answered,
// to order a node's calls as a slow goroutine would.
type ipsHookSlicer struct {
	*ipsSlicer
	mu                           sync.Mutex
	afterAcquireAt, afterRelease func()
}

func (s *ipsHookSlicer) AcquireAt(ctx context.Context, pool string, i int) ([]ipam.Slice, error) {
	got, err := s.ipsSlicer.AcquireAt(ctx, pool, i)
	s.mu.Lock()
	f := s.afterAcquireAt
	s.afterAcquireAt = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return got, err
}

func (s *ipsHookSlicer) Release(ctx context.Context, pool string, i int) error {
	err := s.ipsSlicer.Release(ctx, pool, i)
	s.mu.Lock()
	f := s.afterRelease
	s.afterRelease = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return err
}

// TestLostSliceNotTakenBackByAnOlderAnswer: an answer to an acquire that
// listed a slice, adopted only after the slice was given back and the
// heartbeat said it is lost, must not make the node hand out addresses
// of it again: the controller may lease it to another node.
func TestLostSliceNotTakenBackByAnOlderAnswer(t *testing.T) {
	h := newIPSController(t, "hsn0=10.150.0.0/22:/24")
	ctx := t.Context()
	c, err := controllerclient.Dial(h.addr, controllerclient.Options{Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	base := &ipsSlicer{ipSlicer: ipSlicer{c}}
	hs := &ipsHookSlicer{ipsSlicer: base}
	al, err := ipam.New(ipam.Options{StatePath: filepath.Join(t.TempDir(), "a.json"), Slicer: hs, LowWater: 1, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.SetSliceHolder(sliceHolder{a: al})
	a := &ipsNode{name: "node-a", client: c, slicer: base, alloc: al}
	a.learnPools(t)
	pool := ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/22"), SliceBits: 24}
	if _, err := a.allocate(ctx, "x", netreq.Request{}); err != nil {
		t.Fatal(err)
	}
	s0 := -1
	for i := range a.slices("hsn0") {
		s0 = i
	}
	s1, s2 := (s0+1)%4, (s0+2)%4
	if _, err := a.allocate(ctx, "y", netreq.Request{IP: ipsNthAddr(pool.SlicePrefix(s1), 9)}); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.alloc.Release("y"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	answered, goAcquire := make(chan struct{}), make(chan struct{})
	released, goRelease := make(chan struct{}), make(chan struct{})
	hs.mu.Lock()
	hs.afterAcquireAt = func() { close(answered); <-goAcquire }
	hs.afterRelease = func() { close(released); <-goRelease }
	hs.mu.Unlock()
	zdone := make(chan error, 1)
	go func() {
		_, err := a.allocate(ctx, "z", netreq.Request{IP: ipsNthAddr(pool.SlicePrefix(s2), 9)})
		zdone <- err
	}()
	<-answered // the controller has answered [s0 s1 s2]; adopt waits
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { _ = a.alloc.Run(runCtx); close(runDone) }()
	<-released     // the upkeep gave s1 back; release() waits
	a.heartbeat(t) // reports s1 returning; the answer says lost -> Lost forgets s1
	stop()
	close(goRelease)
	<-runDone
	close(goAcquire)
	if err := <-zdone; err != nil {
		t.Fatal(err)
	}
	held := h.held(t, "hsn0", "node-a")
	t.Logf("allocator holds %v; controller leases node-a %v", a.slices("hsn0"), held)
	for i, s := range a.slices("hsn0") {
		if _, ok := held[i]; !ok && !s.Returning {
			t.Errorf("node-a allocates from slice %d, which the controller does not lease it", i)
		}
	}
	b := h.newNode(t, "node-b", 1)
	dup := ipsNthAddr(pool.SlicePrefix(s1), 20)
	ab, errB := b.allocate(ctx, "b", netreq.Request{IP: dup})
	aa, errA := a.allocate(ctx, "a2", netreq.Request{IP: dup})
	t.Logf("node-b: %v %v; node-a: %v %v", ab, errB, aa, errA)
	if errA == nil && errB == nil {
		t.Errorf("address %s handed out on both node-a and node-b", dup)
	}
}

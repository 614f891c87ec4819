package ipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// Slicer leases slices of IP pools from the controller.
type Slicer interface {
	// Pools returns the controller's IP pools.
	Pools(ctx context.Context) ([]Pool, error)
	// Acquire makes the node hold at least count slices of pool and
	// returns all it holds there; a full pool wraps ErrPoolFull.
	Acquire(ctx context.Context, pool string, count int) ([]Slice, error)
	// AcquireAt leases slice index of pool to the node and returns all it
	// holds there; *SliceTakenError when another node holds it.
	AcquireAt(ctx context.Context, pool string, index int) ([]Slice, error)
	// Release gives a slice back: nil when the controller no longer leases
	// it to the node, ErrReleaseRefused when it certainly still does, any
	// other error when that is unknown.
	Release(ctx context.Context, pool string, index int) error
}

// Options configure an Allocator.
type Options struct {
	// StatePath is the state file, written before every answer.
	StatePath string
	Slicer    Slicer
	Logger    *slog.Logger
	// Registerer takes the allocator's metrics; nil registers none.
	Registerer prometheus.Registerer
	// LowWater: when a pool has fewer free addresses, another slice is
	// leased ahead of need. Default 16.
	LowWater int
	// Interval between the upkeep passes of Run. Default 5s.
	Interval time.Duration
	Now      func() time.Time
	// Refused, if set, is told of each address the CNI plugin asked for
	// and did not get, with the pod the runtime named (which may be
	// empty): the agent writes it on the pod as an event.
	Refused func(pod ipamwire.Pod, err error)
}

// Allocator hands out addresses from the node's slices.
type Allocator struct {
	opts Options
	m    *metrics
	kick chan struct{}

	mu     sync.Mutex
	pools  map[string]*poolState
	owners map[string]*Allocation
	byAddr map[netip.Addr]string
	// seq numbers controller calls; released remembers, per slice, the
	// seq at which it was given back, so that an answer to a call started
	// earlier, which may still list it, does not take it back.
	seq      uint64
	released map[sliceKey]uint64
	passes   int
	// poolsListed: the controller has answered a pool list since start.
	poolsListed bool
}

type sliceKey struct {
	pool  string
	index int
}

type poolState struct {
	Pool
	slices map[int]*heldSlice
}

// Request asks for an owner's address.
type Request struct {
	// Owner keys the allocation; asking again answers the same address.
	Owner string
	// Network is the CNI network, for GC; empty for the agent's own.
	Network string
	// Pool is the default pool; Want.Pool, when set, must agree.
	Pool string
	// Pod names the owner's pod, for inspection.
	Pod  string
	Want netreq.Request
}

// New loads the state file and returns an allocator that serves what it
// records at once; Run keeps its pools warm.
func New(opts Options) (*Allocator, error) {
	if opts.StatePath == "" || opts.Slicer == nil {
		return nil, errors.New("ipam: a state path and a slicer are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LowWater <= 0 {
		opts.LowWater = 16
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	rec, err := loadRecord(opts.StatePath)
	if err != nil {
		return nil, err
	}
	a := &Allocator{opts: opts, kick: make(chan struct{}, 1), pools: map[string]*poolState{},
		owners: map[string]*Allocation{}, byAddr: map[netip.Addr]string{}, released: map[sliceKey]uint64{}}
	if err := a.restore(rec); err != nil {
		return nil, fmt.Errorf("ipam state %s: %w", opts.StatePath, err)
	}
	a.m = newMetrics(opts.Registerer, a)
	for _, name := range a.poolNames() {
		a.m.seePool(name)
	}
	return a, nil
}

// restore rebuilds memory from the record, checking that no address is
// recorded twice and that every allocation lies in a known pool.
func (a *Allocator) restore(rec record) error {
	for _, p := range rec.Pools {
		if err := p.Validate(); err != nil {
			return err
		}
		a.pools[p.Name] = &poolState{Pool: p, slices: map[int]*heldSlice{}}
	}
	for _, s := range rec.Slices {
		ps := a.pools[s.Pool]
		if ps == nil || s.Index < 0 || s.Index >= ps.Slices() || ps.SlicePrefix(s.Index) != s.Prefix {
			return fmt.Errorf("slice %d %s does not belong to a recorded pool %q", s.Index, s.Prefix, s.Pool)
		}
		ps.slices[s.Index] = &heldSlice{Slice: s.Slice, returning: s.Returning}
	}
	for i := range rec.Allocations {
		al := rec.Allocations[i]
		ps := a.pools[al.Pool]
		if ps == nil || !ps.Usable(al.Address) {
			return fmt.Errorf("allocation %s of %s is outside a recorded pool %q", al.Owner, al.Address, al.Pool)
		}
		if other, dup := a.byAddr[al.Address]; dup || a.owners[al.Owner] != nil {
			return fmt.Errorf("address %s recorded for both %s and %s", al.Address, other, al.Owner)
		}
		a.add(&al)
	}
	return nil
}

// add records al in memory.
func (a *Allocator) add(al *Allocation) {
	a.owners[al.Owner] = al
	a.byAddr[al.Address] = al.Owner
	ps := a.pools[al.Pool]
	if i, ok := ps.SliceIndex(al.Address); ok && ps.slices[i] != nil {
		ps.slices[i].used++
	}
}

// remove forgets al in memory.
func (a *Allocator) remove(al *Allocation) {
	delete(a.owners, al.Owner)
	delete(a.byAddr, al.Address)
	ps := a.pools[al.Pool]
	if i, ok := ps.SliceIndex(al.Address); ok && ps.slices[i] != nil {
		ps.slices[i].used--
	}
}

// snapshot is the record of memory; callers hold mu.
func (a *Allocator) snapshot() record {
	r := record{Version: stateVersion}
	for _, name := range a.poolNames() {
		ps := a.pools[name]
		r.Pools = append(r.Pools, ps.Pool)
		for _, i := range sortedKeys(ps.slices) {
			s := ps.slices[i]
			r.Slices = append(r.Slices, sliceRecord{Slice: s.Slice, Returning: s.returning})
		}
	}
	for _, o := range sortedKeys(a.owners) {
		r.Allocations = append(r.Allocations, *a.owners[o])
	}
	return r
}

func (a *Allocator) save() error {
	if err := saveRecord(a.opts.StatePath, a.snapshot()); err != nil {
		a.m.stateErrors.Inc()
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func (a *Allocator) poolNames() []string { return sortedKeys(a.pools) }

func sortedKeys[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Allocate answers the owner's address, with the pool's prefix length.
// An owner that has one gets it again, unless the request now names
// another, which is an error. Errors wrap ErrInvalidRequest, ErrPoolFull,
// ErrAddressTaken or ErrUnavailable and name the values at fault.
func (a *Allocator) Allocate(ctx context.Context, req Request) (Allocation, netip.Prefix, error) {
	start := a.opts.Now()
	al, pfx, err := a.allocate(ctx, req)
	a.m.observe("add", start, err)
	return al, pfx, err
}

func (a *Allocator) allocate(ctx context.Context, req Request) (Allocation, netip.Prefix, error) {
	if req.Owner == "" {
		return Allocation{}, netip.Prefix{}, fmt.Errorf("%w: no owner", ErrInvalidRequest)
	}
	if err := req.Want.Validate(); err != nil {
		return Allocation{}, netip.Prefix{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	// The slow path leases a slice and tries again: twice is enough
	// unless another owner takes every new address meanwhile.
	for attempt := 0; ; attempt++ {
		a.mu.Lock()
		al, pfx, miss, err := a.tryLocal(req)
		seq := a.seq
		a.mu.Unlock()
		if err != nil || miss == nil || attempt == 2 {
			if err == nil && miss != nil {
				err = miss.full(a)
			}
			return al, pfx, err
		}
		if err := a.lease(ctx, miss, seq); err != nil {
			return Allocation{}, netip.Prefix{}, err
		}
	}
}

// miss says what the slow path must lease: one of the candidate slices
// of pool, or any new slice when there are no candidates.
type miss struct {
	pool       *poolState
	candidates []int
	why        string
}

// maxCandidates bounds the slices a subnet request tries to lease.
const maxCandidates = 8

// subnetSlices lists the slices of the subnet the node does not hold,
// at most maxCandidates of them.
func subnetSlices(ps *poolState, subnet netip.Prefix) []int {
	first, _ := ps.SliceIndex(subnet.Addr())
	n := 1
	if subnet.Bits() < ps.SliceBits {
		n = 1 << (ps.SliceBits - subnet.Bits())
	}
	var out []int
	for i := first; i < first+n && len(out) < maxCandidates; i++ {
		if ps.slices[i] == nil {
			out = append(out, i)
		}
	}
	return out
}

func (m *miss) full(a *Allocator) error {
	return fmt.Errorf("%w: pool %s (%s): %s", ErrPoolFull, m.pool.Name, m.pool.Prefix, m.why)
}

// tryLocal allocates from the held slices; callers hold mu. It returns a
// miss when a slice must be leased first.
func (a *Allocator) tryLocal(req Request) (Allocation, netip.Prefix, *miss, error) {
	if al := a.owners[req.Owner]; al != nil {
		ps := a.pools[al.Pool]
		if w := req.Want; (w.IP.IsValid() && w.IP != al.Address) || (w.Subnet.IsValid() && !w.Subnet.Contains(al.Address)) {
			return Allocation{}, netip.Prefix{}, nil, fmt.Errorf("%w: %s already has %s, which the request (ip %v, subnet %v) excludes",
				ErrInvalidRequest, req.Owner, al.Address, w.IP, w.Subnet)
		}
		return *al, netip.PrefixFrom(al.Address, ps.Prefix.Bits()), nil, nil
	}
	ps, err := a.poolFor(req)
	if err != nil {
		return Allocation{}, netip.Prefix{}, nil, err
	}
	addr, m, err := a.pick(ps, req.Want)
	if err != nil || m != nil {
		return Allocation{}, netip.Prefix{}, m, err
	}
	al := &Allocation{Owner: req.Owner, Network: req.Network, Pool: ps.Name, Address: addr, Pod: req.Pod, Since: a.opts.Now()}
	a.add(al)
	if err := a.save(); err != nil {
		a.remove(al)
		return Allocation{}, netip.Prefix{}, nil, err
	}
	s := ps.slices[mustIndex(ps.Pool, addr)]
	s.next = addr.Next()
	a.wake()
	return *al, netip.PrefixFrom(addr, ps.Prefix.Bits()), nil, nil
}

func mustIndex(p Pool, a netip.Addr) int {
	i, _ := p.SliceIndex(a)
	return i
}

// poolFor resolves the request's pool and checks the request against it.
func (a *Allocator) poolFor(req Request) (*poolState, error) {
	name := req.Pool
	if w := req.Want.Pool; w != "" {
		if name != "" && w != name {
			return nil, fmt.Errorf("%w: the pod asks for pool %s, the network is on pool %s", ErrInvalidRequest, w, name)
		}
		name = w
	}
	if len(a.pools) == 0 {
		if a.poolsListed {
			return nil, fmt.Errorf("%w: the controller has no ip pool (its --ip-pools)", ErrInvalidRequest)
		}
		return nil, fmt.Errorf("%w: no ip pool known yet (the controller has not been reached)", ErrUnavailable)
	}
	ps := a.pools[name]
	if ps == nil {
		return nil, fmt.Errorf("%w: no ip pool named %q (pools: %s)", ErrInvalidRequest, name, strings.Join(a.poolNames(), ", "))
	}
	w := req.Want
	if w.Subnet.IsValid() {
		if _, ok := within(w.Subnet, ps.Prefix); !ok || w.Subnet.Bits() < ps.Prefix.Bits() {
			return nil, fmt.Errorf("%w: subnet %s is not inside pool %s (%s)", ErrInvalidRequest, w.Subnet, ps.Name, ps.Prefix)
		}
	}
	if w.IP.IsValid() && !ps.Usable(w.IP) {
		if ps.Prefix.Contains(w.IP) {
			return nil, fmt.Errorf("%w: ip %s is the network or broadcast address of pool %s (%s)", ErrInvalidRequest, w.IP, ps.Name, ps.Prefix)
		}
		return nil, fmt.Errorf("%w: ip %s is outside pool %s (%s)", ErrInvalidRequest, w.IP, ps.Name, ps.Prefix)
	}
	return ps, nil
}

// pick chooses a free address for want from the held slices, or says
// which slice to lease.
func (a *Allocator) pick(ps *poolState, want netreq.Request) (netip.Addr, *miss, error) {
	if ip := want.IP; ip.IsValid() {
		if owner, taken := a.byAddr[ip]; taken {
			return netip.Addr{}, nil, fmt.Errorf("%w: %s of pool %s is held by %s", ErrAddressTaken, ip, ps.Name, owner)
		}
		i, _ := ps.SliceIndex(ip)
		if s := ps.slices[i]; s != nil && !s.returning {
			return ip, nil, nil
		}
		return netip.Addr{}, &miss{pool: ps, candidates: []int{i}, why: fmt.Sprintf("ip %s lies in slice %d", ip, i)}, nil
	}
	r := ps.Prefix
	if want.Subnet.IsValid() {
		r = want.Subnet
	}
	taken := func(x netip.Addr) bool { _, ok := a.byAddr[x]; return ok }
	for _, i := range sortedKeys(ps.slices) {
		s := ps.slices[i]
		in, ok := within(r, s.Prefix)
		if s.returning || !ok || (in == s.Prefix && s.free(ps.Pool) == 0) {
			continue
		}
		if addr, ok := s.findFree(ps.Pool, in, taken); ok {
			return addr, nil, nil
		}
	}
	if want.Subnet.IsValid() {
		return netip.Addr{}, &miss{pool: ps, candidates: subnetSlices(ps, want.Subnet),
			why: fmt.Sprintf("no free address of subnet %s in the node's slices", want.Subnet)}, nil
	}
	return netip.Addr{}, &miss{pool: ps, why: fmt.Sprintf("the node's %d slices have no free address", len(ps.slices))}, nil
}

// wake asks Run for an upkeep pass without waiting.
func (a *Allocator) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Release frees the owner's address; an unknown owner is not an error.
func (a *Allocator) Release(owner string) (bool, error) {
	start := a.opts.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	al := a.owners[owner]
	if al == nil {
		a.m.observe("del", start, nil)
		return false, nil
	}
	a.remove(al)
	if err := a.save(); err != nil {
		a.add(al)
		a.m.observe("del", start, err)
		return false, err
	}
	a.wake()
	a.m.observe("del", start, nil)
	return true, nil
}

// Get returns the owner's allocation.
func (a *Allocator) Get(owner string) (Allocation, netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	al := a.owners[owner]
	if al == nil {
		return Allocation{}, netip.Prefix{}, false
	}
	return *al, netip.PrefixFrom(al.Address, a.pools[al.Pool].Prefix.Bits()), true
}

// Owners returns the owners with an address whose key starts with prefix.
func (a *Allocator) Owners(prefix string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for o := range a.owners {
		if strings.HasPrefix(o, prefix) {
			out = append(out, o)
		}
	}
	sort.Strings(out)
	return out
}

// GC frees the allocations of network whose owner is not in valid, and
// returns how many it freed.
func (a *Allocator) GC(network string, valid map[string]bool) (int, error) {
	if network == "" {
		return 0, fmt.Errorf("%w: GC needs a network name", ErrInvalidRequest)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var gone []*Allocation
	for _, al := range a.owners {
		if al.Network == network && !valid[al.Owner] {
			gone = append(gone, al)
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	for _, al := range gone {
		a.remove(al)
	}
	if err := a.save(); err != nil {
		for _, al := range gone {
			a.add(al)
		}
		return 0, err
	}
	a.wake()
	return len(gone), nil
}

// Free returns the free addresses of the pool's held slices, or an error
// when the pool is unknown.
func (a *Allocator) Free(pool string) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps, err := a.poolFor(Request{Pool: pool})
	if err != nil {
		return 0, err
	}
	return ps.freeAddrs(), nil
}

func (ps *poolState) freeAddrs() uint64 {
	var n uint64
	for _, s := range ps.slices {
		if !s.returning {
			n += s.free(ps.Pool)
		}
	}
	return n
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// Slice is a node slice as the API reports it.
type Slice struct {
	Pool  string
	Index int
	// VNIs is set for a VNI pool, Prefix for an IP pool.
	VNIs      vnialloc.Range
	Prefix    netip.Prefix
	Node      string
	Expires   time.Time
	Allocated int
	// Open: the node allocates from the slice without further report.
	Open bool
}

// SliceUsage is what a node reports about one slice it holds.
type SliceUsage struct {
	Pool      string
	Index     int
	Allocated int
	// Open says the node allocates from the slice without further report,
	// so Allocated may grow after the report: the sweep keeps such a slice
	// while its node is only silent.
	Open bool
}

// Pool describes a configured pool for inspection.
type Pool struct {
	Spec   slices.PoolSpec
	Slices int
	Leased int
}

func sliceInfo(spec slices.PoolSpec, r store.Slice) Slice {
	out := Slice{Pool: r.Pool, Index: r.Index, Node: r.Node, Expires: r.Expires, Allocated: r.Allocated, Open: r.Open}
	if !spec.VNIs.Empty() {
		out.VNIs = spec.VNISlice(r.Index)
	} else {
		out.Prefix = spec.PrefixSlice(r.Index)
	}
	return out
}

func (s *Allocator) table(pool string) (*slices.Table, error) {
	t := s.pools[pool]
	if t == nil {
		return nil, &FieldError{Field: "pool", Reason: fmt.Sprintf("no pool named %q", pool)}
	}
	return t, nil
}

func (s *Allocator) held(t *slices.Table, node string) []Slice {
	var out []Slice
	for _, r := range t.Held(node) {
		out = append(out, sliceInfo(t.Spec(), r))
	}
	return out
}

// AcquireSlices makes node hold at least count (1..64) slices of pool and
// returns all it holds there. New slices are leased open. It is
// idempotent. Errors wrap ErrUnavailable, ErrInvalidArgument or
// ErrExhausted (pool full).
func (s *Allocator) AcquireSlices(ctx context.Context, node, pool string, count int) ([]Slice, error) {
	start := time.Now()
	var out []Slice
	err := validateNode(node, true)
	if err == nil && (count < 1 || count > slices.MaxPerNode) {
		err = &FieldError{Field: "count", Reason: fmt.Sprintf("%d outside 1-%d", count, slices.MaxPerNode)}
	}
	if err == nil {
		out, err = s.acquireSlices(ctx, node, pool, func(t *slices.Table, now time.Time) ([]store.Op, error) {
			ops, err := t.Acquire(node, count, now, s.cfg.SliceTTL)
			if err != nil {
				return nil, &ExhaustedError{Resource: pool, Range: t.Spec().String(), Capacity: t.Spec().Count(), Err: err}
			}
			return ops, nil
		})
	}
	s.m.observeAcquire("slice", time.Since(start), err)
	return out, err
}

// AcquireSliceAt makes node hold slice index of pool, as for a pod that
// asks for a fixed id outside the node's other slices, and returns all
// the node holds in pool. A free slice is leased to it, open; one it
// holds is left as it is. A slice another node holds is refused with an
// error wrapping a *slices.TakenError that names that node. Other errors
// wrap ErrUnavailable, ErrInvalidArgument (no such pool or slice) or
// ErrExhausted (the node holds 64 slices of the pool).
func (s *Allocator) AcquireSliceAt(ctx context.Context, node, pool string, index int) ([]Slice, error) {
	start := time.Now()
	var out []Slice
	err := validateNode(node, true)
	if err == nil {
		out, err = s.acquireSlices(ctx, node, pool, func(t *slices.Table, now time.Time) ([]store.Op, error) {
			ops, err := t.AcquireAt(node, index, now, s.cfg.SliceTTL)
			switch {
			case errors.Is(err, slices.ErrOutOfRange):
				return nil, &FieldError{Field: "index", Reason: err.Error()}
			case errors.Is(err, slices.ErrNodeFull):
				return nil, &ExhaustedError{Resource: pool, Range: t.Spec().String(), Capacity: slices.MaxPerNode, Err: err}
			case err != nil:
				return nil, fmt.Errorf("acquire slice %d of pool %s for node %s: %w", index, pool, node, err)
			}
			return ops, nil
		})
	}
	s.m.observeAcquire("slice", time.Since(start), err)
	return out, err
}

// acquireSlices runs lease on pool's table under the lock, records the
// node seen, and returns what the node holds in pool once the change
// has committed.
func (s *Allocator) acquireSlices(ctx context.Context, node, pool string, lease func(*slices.Table, time.Time) ([]store.Op, error)) ([]Slice, error) {
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	t, err := s.table(pool)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	now := s.now()
	ops, err := lease(t, now)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.lastSeen[node] = now
	b := s.enqueue(ops...)
	out := s.held(t, node)
	s.mu.Unlock()
	return out, s.wait(ctx, b)
}

// RenewSlices is a node's heartbeat: it extends every slice lease of the
// node and records the usage it reports (ids allocated, and whether the
// node allocates from the slice without further report); a slice it does
// not report keeps its last report. It returns the slices the node
// holds in every pool and the reported slices it does not hold (lost: the
// node must stop allocating from them). Errors wrap ErrUnavailable or
// ErrInvalidArgument.
func (s *Allocator) RenewSlices(ctx context.Context, node string, usage []SliceUsage) (held []Slice, lost []SliceUsage, err error) {
	if err := validateNode(node, true); err != nil {
		return nil, nil, err
	}
	byPool := map[string]map[int]slices.Usage{}
	for i, u := range usage {
		if u.Allocated < 0 || u.Index < 0 {
			return nil, nil, &FieldError{Field: fmt.Sprintf("usage[%d]", i), Reason: "negative index or allocated count"}
		}
		if byPool[u.Pool] == nil {
			byPool[u.Pool] = map[int]slices.Usage{}
		}
		byPool[u.Pool][u.Index] = slices.Usage{Allocated: u.Allocated, Open: u.Open}
	}
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	now := s.now()
	s.lastSeen[node] = now
	var ops []store.Op
	for pool, m := range byPool {
		if s.pools[pool] == nil {
			for i, u := range m {
				lost = append(lost, SliceUsage{Pool: pool, Index: i, Allocated: u.Allocated, Open: u.Open})
			}
		}
	}
	for _, name := range s.poolOrder {
		t := s.pools[name]
		o, l := t.Renew(node, byPool[name], now, s.cfg.SliceTTL)
		ops = append(ops, o...)
		for _, i := range l {
			u := byPool[name][i]
			lost = append(lost, SliceUsage{Pool: name, Index: i, Allocated: u.Allocated, Open: u.Open})
		}
		held = append(held, s.held(t, node)...)
	}
	b := s.enqueue(ops...)
	s.mu.Unlock()
	return held, lost, s.wait(ctx, b)
}

// ReleaseSlice gives back a slice the node holds and has nothing
// allocated from. Releasing a slice the node does not hold returns an
// error wrapping ErrNotFound; other errors wrap ErrUnavailable or
// ErrInvalidArgument.
func (s *Allocator) ReleaseSlice(ctx context.Context, node, pool string, index int) error {
	if err := validateNode(node, true); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return err
	}
	t, err := s.table(pool)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	ops, err := t.Release(node, index)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	b := s.enqueue(ops...)
	s.mu.Unlock()
	return s.wait(ctx, b)
}

// ListSlices returns the leased slices, optionally of one pool and/or one
// node, and the configured pools. Errors wrap ErrUnavailable.
func (s *Allocator) ListSlices(pool, node string) ([]Slice, []Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate(); err != nil {
		return nil, nil, err
	}
	var out []Slice
	var pools []Pool
	for _, name := range s.poolOrder {
		t := s.pools[name]
		pools = append(pools, Pool{Spec: t.Spec(), Slices: t.Spec().Count(), Leased: t.Leased()})
		if pool != "" && pool != name {
			continue
		}
		for _, r := range t.All() {
			if node == "" || r.Node == node {
				out = append(out, sliceInfo(t.Spec(), r))
			}
		}
	}
	return out, pools, nil
}

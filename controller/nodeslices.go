package controller

import (
	"context"
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
}

// SliceUsage is what a node reports about one slice it holds.
type SliceUsage struct {
	Pool      string
	Index     int
	Allocated int
}

// Pool describes a configured pool for inspection.
type Pool struct {
	Spec   slices.PoolSpec
	Slices int
	Leased int
}

func sliceInfo(spec slices.PoolSpec, r store.Slice) Slice {
	out := Slice{Pool: r.Pool, Index: r.Index, Node: r.Node, Expires: r.Expires, Allocated: r.Allocated}
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
// returns all it holds there. It is idempotent. Errors wrap
// ErrUnavailable, ErrInvalidArgument or ErrExhausted (pool full).
func (s *Allocator) AcquireSlices(ctx context.Context, node, pool string, count int) ([]Slice, error) {
	start := time.Now()
	out, err := s.acquireSlices(ctx, node, pool, count)
	s.m.observeAcquire("slice", time.Since(start), err)
	return out, err
}

func (s *Allocator) acquireSlices(ctx context.Context, node, pool string, count int) ([]Slice, error) {
	if err := validateNode(node, true); err != nil {
		return nil, err
	}
	if count < 1 || count > slices.MaxPerNode {
		return nil, &FieldError{Field: "count", Reason: fmt.Sprintf("%d outside 1-%d", count, slices.MaxPerNode)}
	}
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
	ops, err := t.Acquire(node, count, now, s.cfg.SliceTTL)
	if err != nil {
		s.mu.Unlock()
		return nil, &ExhaustedError{Resource: pool, Range: t.Spec().String(), Capacity: t.Spec().Count(), Err: err}
	}
	s.lastSeen[node] = now
	b := s.enqueue(ops...)
	out := s.held(t, node)
	s.mu.Unlock()
	return out, s.wait(ctx, b)
}

// RenewSlices is a node's heartbeat: it extends every slice lease of the
// node and records the usage it reports. It returns the slices the node
// holds in every pool and the reported slices it does not hold (lost: the
// node must stop allocating from them). Errors wrap ErrUnavailable or
// ErrInvalidArgument.
func (s *Allocator) RenewSlices(ctx context.Context, node string, usage []SliceUsage) (held []Slice, lost []SliceUsage, err error) {
	if err := validateNode(node, true); err != nil {
		return nil, nil, err
	}
	byPool := map[string]map[int]int{}
	for i, u := range usage {
		if u.Allocated < 0 || u.Index < 0 {
			return nil, nil, &FieldError{Field: fmt.Sprintf("usage[%d]", i), Reason: "negative index or allocated count"}
		}
		if byPool[u.Pool] == nil {
			byPool[u.Pool] = map[int]int{}
		}
		byPool[u.Pool][u.Index] = u.Allocated
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
			for i, n := range m {
				lost = append(lost, SliceUsage{Pool: pool, Index: i, Allocated: n})
			}
		}
	}
	for _, name := range s.poolOrder {
		t := s.pools[name]
		o, l := t.Renew(node, byPool[name], now, s.cfg.SliceTTL)
		ops = append(ops, o...)
		for _, i := range l {
			lost = append(lost, SliceUsage{Pool: name, Index: i, Allocated: byPool[name][i]})
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

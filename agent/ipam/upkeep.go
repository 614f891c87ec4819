package ipam

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// callTimeout bounds one controller call of the upkeep or the slow path.
const callTimeout = 10 * time.Second

// lease runs the slow path of an allocation: it leases a slice the miss
// names, or any new one, and adopts what the controller answers.
func (a *Allocator) lease(ctx context.Context, m *miss, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	a.m.slowPath.WithLabelValues(m.pool.Name).Inc()
	if len(m.candidates) == 0 {
		a.mu.Lock()
		want := len(m.pool.slices) + 1
		a.mu.Unlock()
		got, err := a.opts.Slicer.Acquire(ctx, m.pool.Name, want)
		if err != nil {
			return a.leaseError(m, err)
		}
		return a.adopt(m.pool.Name, got, seq)
	}
	var last error
	for _, i := range m.candidates {
		got, err := a.opts.Slicer.AcquireAt(ctx, m.pool.Name, i)
		if err == nil {
			return a.adopt(m.pool.Name, got, seq)
		}
		last = err
		var taken *SliceTakenError
		if !errors.As(err, &taken) {
			break
		}
	}
	return a.leaseError(m, last)
}

func (a *Allocator) leaseError(m *miss, err error) error {
	var taken *SliceTakenError
	switch {
	case errors.As(err, &taken):
		return fmt.Errorf("%w: %s, and %v: that address range is another node's", ErrAddressTaken, m.why, err)
	case errors.Is(err, ErrPoolFull):
		return fmt.Errorf("%w (%s)", m.full(a), err)
	case len(m.candidates) == 0 && len(m.pool.slices) > 0:
		return fmt.Errorf("%w: pool %s: the node's slices are full and leasing another failed: %w", ErrUnavailable, m.pool.Name, err)
	default:
		return fmt.Errorf("%w: pool %s: lease a slice (%s): %w", ErrUnavailable, m.pool.Name, m.why, err)
	}
}

// adopt records the slices the controller says the node holds in pool,
// except those given back after the call that answered was made.
func (a *Allocator) adopt(pool string, got []Slice, seq uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := a.pools[pool]
	if ps == nil {
		return fmt.Errorf("%w: pool %s vanished while leasing", ErrUnavailable, pool)
	}
	var added []int
	for _, s := range got {
		if s.Pool != pool || ps.slices[s.Index] != nil || a.released[sliceKey{pool, s.Index}] > seq {
			continue
		}
		if s.Index < 0 || s.Index >= ps.Slices() || ps.SlicePrefix(s.Index) != s.Prefix {
			a.opts.Logger.Error("controller answered a slice that does not fit the pool", "pool", pool, "index", s.Index, "prefix", s.Prefix)
			continue
		}
		ps.slices[s.Index] = &heldSlice{Slice: s, used: a.usedIn(ps, s.Prefix)}
		added = append(added, s.Index)
	}
	if len(added) == 0 {
		return nil
	}
	// The slices are the node's whether or not this write lands: the
	// record only has to know them before an address of theirs goes out,
	// and the next save carries them.
	if err := a.save(); err != nil {
		return err
	}
	a.opts.Logger.Info("leased ip slices", "pool", pool, "indices", added)
	return nil
}

// Run keeps the pools warm until ctx ends: it learns the pools, leases a
// slice ahead of need when a pool runs low, and gives back empty slices
// beyond what the low-water mark needs. Every pass makes a bounded number
// of calls; a failed one is tried again at the next pass.
func (a *Allocator) Run(ctx context.Context) error {
	t := time.NewTicker(a.opts.Interval)
	defer t.Stop()
	for {
		a.upkeep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.kick:
		}
	}
}

// upkeep is one pass of Run.
func (a *Allocator) upkeep(ctx context.Context) {
	if err := a.refreshPools(ctx); err != nil {
		a.opts.Logger.Warn("ip pools not known", "err", err)
	}
	a.mu.Lock()
	names := a.poolNames()
	a.mu.Unlock()
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		a.fill(ctx, name)
		a.giveBack(ctx, name)
	}
}

// refreshPools asks the controller for its pools until it has answered
// once, then every 60 passes, and adds those it did not know. A pool
// whose prefix or slicing changed keeps its record: its addresses are in
// use. A controller with no IP pool is thus asked every few minutes, not
// at every pass by every node.
func (a *Allocator) refreshPools(ctx context.Context) error {
	a.mu.Lock()
	listed := a.poolsListed
	a.mu.Unlock()
	if listed && !a.due() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pools, err := a.opts.Slicer.Pools(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.poolsListed = true
	changed := false
	for _, p := range pools {
		if err := p.Validate(); err != nil {
			a.opts.Logger.Error("controller's ip pool is unusable", "err", err)
			continue
		}
		old := a.pools[p.Name]
		switch {
		case old == nil:
			a.pools[p.Name] = &poolState{Pool: p, slices: map[int]*heldSlice{}}
			a.m.seePool(p.Name)
			changed = true
		case old.Pool != p:
			a.opts.Logger.Error("controller's ip pool changed; keeping the recorded one while the node holds its slices",
				"pool", p.Name, "recorded", old.Prefix, "recordedSliceBits", old.SliceBits, "now", p.Prefix, "nowSliceBits", p.SliceBits)
		}
	}
	if changed {
		return a.save()
	}
	return nil
}

// due reports whether a known set of pools should be asked again: every
// 60 upkeep passes, so that a pool added to the controller is found.
func (a *Allocator) due() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.passes++
	return a.passes%60 == 0
}

// fill leases one more slice of pool when its free addresses are below
// the low-water mark, or it holds none.
func (a *Allocator) fill(ctx context.Context, pool string) {
	a.mu.Lock()
	ps := a.pools[pool]
	low := ps.freeAddrs() < uint64(a.opts.LowWater) || len(ps.slices) == 0
	want := len(ps.slices) + 1
	seq := a.seq
	a.mu.Unlock()
	if !low {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	got, err := a.opts.Slicer.Acquire(cctx, pool, want)
	if err != nil {
		a.opts.Logger.Warn("lease an ip slice ahead of need", "pool", pool, "err", err)
		return
	}
	if err := a.adopt(pool, got, seq); err != nil {
		a.opts.Logger.Warn("record leased ip slices", "pool", pool, "err", err)
	}
}

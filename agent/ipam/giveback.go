package ipam

import (
	"context"
	"errors"
	"net/netip"
)

// giveBack returns pool's empty slices that the low-water mark does not
// need, and tries again those whose last release had no certain answer.
//
// A slice is marked returning, and that is written, before the release
// is sent: from then on no address of it is handed out, so a release the
// controller applies, even one whose answer is lost, never finds an
// address of it in use.
func (a *Allocator) giveBack(ctx context.Context, pool string) {
	a.mu.Lock()
	ps := a.pools[pool]
	var pending []int
	for _, i := range sortedKeys(ps.slices) {
		if s := ps.slices[i]; s.returning && s.used == 0 {
			pending = append(pending, i)
		}
	}
	if i, ok := a.surplus(ps); ok {
		ps.slices[i].returning = true
		if err := a.save(); err != nil {
			ps.slices[i].returning = false
			a.opts.Logger.Warn("record an ip slice's give-back", "pool", pool, "index", i, "err", err)
		} else {
			pending = append(pending, i)
		}
	}
	a.mu.Unlock()
	for _, i := range pending {
		a.release(ctx, ps, i)
	}
}

// surplus picks an empty slice whose addresses the pool does not need:
// without it the pool keeps at least one slice and twice the low-water
// mark free. Callers hold mu.
func (a *Allocator) surplus(ps *poolState) (int, bool) {
	free := ps.freeAddrs()
	keep := uint64(2 * a.opts.LowWater)
	held := 0
	for _, s := range ps.slices {
		if !s.returning {
			held++
		}
	}
	// The highest index first: the pool stays compact at its low end.
	keys := sortedKeys(ps.slices)
	for k := len(keys) - 1; k >= 0 && held > 1; k-- {
		s := ps.slices[keys[k]]
		if s.returning || s.used != 0 {
			continue
		}
		if c := s.capacity(ps.Pool); free >= c && free-c >= keep {
			return keys[k], true
		}
	}
	return 0, false
}

// release sends one slice's give-back and settles it by the answer.
func (a *Allocator) release(ctx context.Context, ps *poolState, i int) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := a.opts.Slicer.Release(cctx, ps.Name, i)
	a.mu.Lock()
	defer a.mu.Unlock()
	s := ps.slices[i]
	if s == nil || !s.returning {
		return
	}
	switch {
	case err == nil:
		delete(ps.slices, i)
		a.seq++
		a.released[sliceKey{ps.Name, i}] = a.seq
		a.opts.Logger.Info("gave back an ip slice", "pool", ps.Name, "index", i, "prefix", s.Prefix)
	case errors.Is(err, ErrReleaseRefused):
		s.returning = false
		a.opts.Logger.Warn("controller kept an ip slice; it is used again", "pool", ps.Name, "index", i, "err", err)
	default:
		a.opts.Logger.Warn("give back an ip slice: no certain answer, will try again", "pool", ps.Name, "index", i, "err", err)
		return
	}
	if err := a.save(); err != nil {
		a.opts.Logger.Warn("record an ip slice's give-back", "pool", ps.Name, "index", i, "err", err)
	}
}

// Report is what the heartbeat tells the controller about one slice.
type Report struct {
	Pool      string
	Index     int
	Allocated int
	// Open: the node may hand out addresses of the slice with no further
	// report, so the controller must keep it even while the node is
	// silent.
	Open bool
}

// Reports returns the heartbeat's report of every held slice.
func (a *Allocator) Reports() []Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Report
	for _, name := range a.poolNames() {
		ps := a.pools[name]
		for _, i := range sortedKeys(ps.slices) {
			s := ps.slices[i]
			out = append(out, Report{Pool: name, Index: i, Allocated: s.used, Open: !s.returning})
		}
	}
	return out
}

// Lost takes the heartbeat's word that the node no longer holds these
// slices: nothing more is handed out of them, an empty one is forgotten,
// and the addresses still in use stay recorded, loudly, until their
// owners release them.
func (a *Allocator) Lost(lost []Report) {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for _, l := range lost {
		ps := a.pools[l.Pool]
		if ps == nil || ps.slices[l.Index] == nil {
			continue
		}
		s := ps.slices[l.Index]
		a.m.lostSlices.WithLabelValues(l.Pool).Inc()
		if s.used == 0 {
			// Forgotten as given back: an answer to a call made before
			// now may still list it, and must not take it up again.
			delete(ps.slices, l.Index)
			a.seq++
			a.released[sliceKey{l.Pool, l.Index}] = a.seq
		} else {
			s.returning = true
			a.opts.Logger.Error("controller no longer leases an ip slice with addresses in use; they may be given to another node",
				"pool", l.Pool, "index", l.Index, "prefix", s.Prefix, "inUse", s.used)
		}
		changed = true
	}
	if changed {
		if err := a.save(); err != nil {
			a.opts.Logger.Warn("record lost ip slices", "err", err)
		}
	}
}

// usedIn counts the recorded addresses of slice i; callers hold mu.
func (a *Allocator) usedIn(ps *poolState, p netip.Prefix) int {
	n := 0
	for addr := range a.byAddr {
		if p.Contains(addr) {
			n++
		}
	}
	return n
}

package controller

import (
	"context"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
)

func (s *Allocator) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweep", "err", err)
			}
		}
	}
}

// SweepResult counts what one sweep did.
type SweepResult struct {
	// Expired VNIs left quarantine.
	Expired int
	// Freed leases whose owner was found gone.
	Freed int
	// DroppedHolders are nodes removed from leases because their Node
	// object is deleted for longer than the grace period.
	DroppedHolders int
	// UnusedHolds are nodes removed from leases whose VNI their reports
	// stopped naming (see ReportVNIsInUse).
	UnusedHolds int
	// Reclaimed node slices, and Stranded ones kept because their gone
	// node last reported ids in use or, while only silent, the slice open.
	Reclaimed, Stranded int
}

// Sweep runs one reclaim pass: quarantine expiry; holders on deleted
// nodes; owners gone from the API (leases no node holds, at most
// SweepOwners look-ups); slices of gone nodes. Run calls it every
// SweepInterval. It returns an error wrapping ErrUnavailable before the
// state is loaded, or the commit's error.
func (s *Allocator) Sweep(ctx context.Context) error {
	_, err := s.sweep(ctx)
	return err
}

func (s *Allocator) sweep(ctx context.Context) (SweepResult, error) {
	var r SweepResult
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return r, err
	}
	now := s.now()
	ops := s.expireLocked(now)
	r.Expired = len(ops)
	var b *batch
	if len(ops) > 0 {
		b = s.enqueue(ops...)
	}
	var candidates []store.Lease
	for _, l := range s.leases {
		if lb, freed := s.dropHoldsLocked(l, now, &r); freed {
			b = lb
			continue
		} else if lb != nil {
			b = lb
		}
		if s.res != nil && len(l.rec.Nodes) == 0 && !l.rec.OwnerGone && l.rec.Scope != store.ScopePod &&
			len(candidates) < s.cfg.SweepOwners {
			candidates = append(candidates, l.rec)
		}
	}
	s.pruneHoldsLocked(now)
	if sb := s.reclaimSlicesLocked(now, &r); sb != nil {
		b = sb
	}
	s.mu.Unlock()
	if err := s.wait(ctx, b); err != nil {
		return r, err
	}
	return r, s.freeGoneOwners(ctx, candidates, &r)
}

// dropHoldsLocked drops l's holds by nodes that are gone or no longer
// use its VNI, and frees l when that leaves it without owner and holder.
// It returns the batch of the change, if any, and whether l was freed.
func (s *Allocator) dropHoldsLocked(l *lease, now time.Time, r *SweepResult) (*batch, bool) {
	if len(l.rec.Nodes) == 0 {
		return nil, false
	}
	kept := l.rec.Nodes[:0:0]
	for _, n := range l.rec.Nodes {
		if s.nodeGoneLocked(n, now) {
			r.DroppedHolders++
			continue
		}
		if s.unusedLocked(l.rec, n, now) {
			r.UnusedHolds++
			s.m.unusedHolds.Inc()
			s.log.Warn("node no longer uses the vni it holds; hold dropped", "lease", l.rec.Key, "vni", l.rec.VNI, "node", n)
			continue
		}
		kept = append(kept, n)
	}
	if len(kept) == len(l.rec.Nodes) {
		return nil, false
	}
	l.rec.Nodes = kept
	if l.rec.Scope == store.ScopePod && len(kept) == 0 {
		l.rec.OwnerGone = true
	}
	b := s.putLocked(l)
	if l.rec.OwnerGone && len(kept) == 0 {
		r.Freed++
		return s.freeLocked(l, now), true
	}
	return b, false
}

// reclaimSlicesLocked takes back the slices of gone nodes, after the
// grace period, and returns the batch that records it, if any.
func (s *Allocator) reclaimSlicesLocked(now time.Time, r *SweepResult) *batch {
	var nodeGone func(string) (time.Time, bool)
	if s.nodes != nil {
		nodeGone = s.nodes.NodeGone
	}
	var b *batch
	for _, name := range s.poolOrder {
		o, stranded := s.pools[name].Reclaim(now, s.cfg.SliceGrace, nodeGone)
		r.Reclaimed += len(o)
		r.Stranded += stranded
		if len(o) > 0 {
			b = s.enqueue(o...)
		}
	}
	s.m.stranded.Set(float64(r.Stranded))
	return b
}

// freeGoneOwners asks the API whether the candidates' owners still exist,
// without the lock, and frees the leases whose owner is gone, each
// re-validated against the lease's version first.
func (s *Allocator) freeGoneOwners(ctx context.Context, candidates []store.Lease, r *SweepResult) error {
	var gone []store.Lease
	for _, c := range candidates {
		ok, err := s.res.OwnerExists(ctx, c.Owner)
		if err != nil {
			s.log.Debug("owner look-up", "lease", c.Key, "err", err)
			continue
		}
		if !ok {
			gone = append(gone, c)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	s.mu.Lock()
	if err := s.gate(); err != nil {
		s.mu.Unlock()
		return err
	}
	var b *batch
	now := s.now()
	for _, c := range gone {
		l := s.leases[c.Key]
		if l == nil || l.rec.Version != c.Version || len(l.rec.Nodes) != 0 || l.rec.OwnerGone {
			continue
		}
		l.rec.OwnerGone = true
		s.putLocked(l)
		b = s.freeLocked(l, now)
		r.Freed++
		s.log.Info("owner gone; vni freed", "lease", c.Key, "vni", c.VNI)
	}
	s.mu.Unlock()
	return s.wait(ctx, b)
}

// NodeSeen returns when node last acquired or renewed slices (its
// agent's heartbeat), and false when it has not since the controller
// started.
func (s *Allocator) NodeSeen(node string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.lastSeen[node]
	return t, ok
}

// NodesSeen returns when each node last acquired or renewed slices.
func (s *Allocator) NodesSeen() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.lastSeen))
	for k, v := range s.lastSeen {
		out[k] = v
	}
	return out
}

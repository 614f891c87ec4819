package controller

import (
	"slices"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
)

// ReportVNIsInUse records node's report of every VNI it uses: those of
// the CXI services on its NICs and of the leases in its own records. A
// sweep drops the node's hold on a lease whose VNI such a report lacks
// although it was made at least Config.HoldGrace after the node last
// acquired the lease. This ends the holds a node keeps at the
// controller for leases it no longer knows of, such as one acquired just
// before the agent crashed and before it recorded the lease: the node
// can never release those, and a job lease would stay leased until the
// node is deleted. A report replaces the node's previous one. It returns
// an error wrapping ErrInvalidArgument for a bad node name, or
// ErrUnavailable before the state is loaded.
func (s *Allocator) ReportVNIsInUse(node string, vnis []uint16) error {
	if err := validateNode(node, true); err != nil {
		return err
	}
	set := make(map[uint16]bool, len(vnis))
	for _, v := range vnis {
		set[v] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gate(); err != nil {
		return err
	}
	s.inUse[node] = vniReport{vnis: set, at: s.now()}
	return nil
}

// nodeGoneLocked reports whether node's Node object has been deleted for
// at least the slice grace period.
func (s *Allocator) nodeGoneLocked(node string, now time.Time) bool {
	if s.nodes == nil {
		return false
	}
	since, gone := s.nodes.NodeGone(node)
	return gone && now.Sub(since) >= s.cfg.SliceGrace
}

// unusedLocked reports whether node's hold on l is to be dropped: the
// node's last report lacks l's VNI and came at least HoldGrace after the
// node last acquired l. A hold this controller has not seen acquired (it
// loaded it) counts from now.
func (s *Allocator) unusedLocked(l store.Lease, node string, now time.Time) bool {
	if s.cfg.HoldGrace < 0 {
		return false
	}
	rep, ok := s.inUse[node]
	if !ok || rep.vnis[l.VNI] {
		return false
	}
	h := hold{l.Key, node}
	since, ok := s.acquired[h]
	if !ok {
		s.acquired[h] = now
		return false
	}
	return rep.at.Sub(since) >= s.cfg.HoldGrace
}

// pruneHoldsLocked forgets acquire times of holds that ended and the
// reports of nodes that are gone.
func (s *Allocator) pruneHoldsLocked(now time.Time) {
	for h := range s.acquired {
		if l := s.leases[h.key]; l == nil || !slices.Contains(l.rec.Nodes, h.node) {
			delete(s.acquired, h)
		}
	}
	for n := range s.inUse {
		if s.nodeGoneLocked(n, now) {
			delete(s.inUse, n)
		}
	}
}

package engine

import "sync"

// leaseHolds counts the local holders (pods, claims) of each controller
// lease. The controller records a job's lease as held by a node, not by a
// pod, so the node's hold may be released only with its last local holder:
// the other pods of the job on this node still run on the VNI.
//
// A release and an acquire of one lease may cross: a pod's acquire is
// answered while another pod's release, the last, is on its way, and the
// release then drops the hold the new pod relies on. A release therefore
// opens an epoch, and an acquire that began before a release of its lease
// finished acquires again (once: after it, its own hold keeps any new
// release from starting).
type leaseHolds struct {
	mu     sync.Mutex // guards everything below
	cond   *sync.Cond // signalled when a release ends
	epoch  uint64     // counts the releases begun
	leases map[string]*holders
	// pending counts the acquires under way by the epoch they began in;
	// a lease's entry is kept while one of them may need its epoch.
	pending map[uint64]int
}

type holders struct {
	pods      map[string]bool // pod keys
	releasing int             // releases in flight
	lastBegun uint64          // epoch of the last release begun
}

func newLeaseHolds() *leaseHolds {
	h := &leaseHolds{leases: map[string]*holders{}, pending: map[uint64]int{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *leaseHolds) entry(lease string) *holders {
	e := h.leases[lease]
	if e == nil {
		e = &holders{pods: map[string]bool{}}
		h.leases[lease] = e
	}
	return e
}

// begin returns the epoch to pass to add, or to abandon, after the
// acquire that follows.
func (h *leaseHolds) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending[h.epoch]++
	return h.epoch
}

// abandon ends an acquire begun at since that failed.
func (h *leaseHolds) abandon(since uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unpendLocked(since)
}

func (h *leaseHolds) unpendLocked(since uint64) {
	if h.pending[since]--; h.pending[since] <= 0 {
		delete(h.pending, since)
	}
	h.pruneLocked()
}

// pruneLocked drops the entries of leases nobody holds or releases whose
// last release began before every acquire under way: for those, add
// answers the same with or without the entry.
func (h *leaseHolds) pruneLocked() {
	oldest, any := uint64(0), false
	for since := range h.pending {
		if !any || since < oldest {
			oldest, any = since, true
		}
	}
	for lease, e := range h.leases {
		if len(e.pods) == 0 && e.releasing == 0 && (!any || e.lastBegun <= oldest) {
			delete(h.leases, lease)
		}
	}
}

// add records pod as a holder of lease, acquired after begin returned
// since. It waits for releases of lease in flight and reports false when
// one began after since: the acquire may have been undone, and must be
// made again (pod is already counted, so no release can begin now).
func (h *leaseHolds) add(lease, pod string, since uint64) (fresh bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.unpendLocked(since)
	if lease == "" {
		return true
	}
	e := h.entry(lease)
	e.pods[pod] = true
	for e.releasing > 0 {
		h.cond.Wait()
	}
	return e.lastBegun <= since
}

// join records pod as a holder of lease when the lease has other holders
// and no release of it is in flight: then the node's hold at the
// controller stands, and no acquire is needed. It reports whether it did.
func (h *leaseHolds) join(lease, pod string) bool {
	if lease == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.leases[lease]
	if e == nil || len(e.pods) == 0 || e.releasing > 0 {
		return false
	}
	e.pods[pod] = true
	return true
}

// count is the number of holders of lease.
func (h *leaseHolds) count(lease string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.leases[lease]; e != nil {
		return len(e.pods)
	}
	return 0
}

// restore records pod as a holder of lease, as the checkpoint says at
// start, before any acquire or release runs.
func (h *leaseHolds) restore(lease, pod string) {
	if lease == "" {
		return
	}
	h.mu.Lock()
	h.entry(lease).pods[pod] = true
	h.mu.Unlock()
}

// drop removes pod from lease's holders. It reports whether pod was the
// last, in which case the caller releases the node's hold and then calls
// done; a release that fails is retried by dropping again.
func (h *leaseHolds) drop(lease, pod string) (last bool) {
	if lease == "" {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entry(lease)
	delete(e.pods, pod)
	if len(e.pods) > 0 {
		return false
	}
	h.epoch++
	e.lastBegun = h.epoch
	e.releasing++
	return true
}

// done ends a release that drop began.
func (h *leaseHolds) done(lease string) {
	if lease == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases[lease].releasing--
	h.pruneLocked()
	h.cond.Broadcast()
}

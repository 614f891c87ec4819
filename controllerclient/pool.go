package controllerclient

import (
	"sort"
	"sync"

	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// podPool is the node's local pool of pod-scoped VNIs: the VNIs of the
// slices it holds, split into free (a FIFO, so a returned VNI is reused
// last) and in use.
//
// A slice being given back to the controller is in returning from the
// moment it is chosen, under the same lock as take, so that no VNI of it
// is handed out from then on: its free VNIs leave the free list at once,
// and it is chosen only with nothing in use. It leaves returning when the
// controller says it no longer leases the slice (dropped), or when the
// controller certainly refused and a heartbeat has since reported the
// slice open again (its VNIs are free again then). After an answer that
// leaves it unknown whether the release happened, the slice stays
// returning and the release is retried: a release that happened, or that
// still lands later, must never find a VNI of the slice in use.
//
// Heartbeats report every held slice open except those returning: the
// controller keeps an open slice of a silent node, since the node may have
// handed out a VNI of it after its last report. A slice reported closed
// is never handed out from again before a heartbeat that reports it open
// has been answered.
type podPool struct {
	mu        sync.Mutex
	slices    map[int]vnialloc.Range
	returning map[int]*giveBack
	free      []uint16
	head      int
	isFree    map[uint16]bool
	inUse     map[uint16]bool
	changed   chan struct{} // closed and replaced on every refill
	off       bool          // the controller has no pod pool
}

// giveBack is one slice's way back to the controller; its pointer names
// that attempt, so that the answer to an old one cannot settle a newer.
type giveBack struct {
	r vnialloc.Range
	// inFlight is set while a ReleaseSlice call for the slice is running;
	// otherwise the last call's outcome was unknown and it is retried.
	inFlight bool
	// reopen is set once the controller refused the release: the slice
	// is reported open again, and its VNIs are free once a heartbeat that
	// said so has been answered.
	reopen bool
}

// giveBackOutcome is what a ReleaseSlice call tells about the slice.
type giveBackOutcome int

const (
	// released: the controller no longer leases the slice to the node
	// (it said so, or said that the node does not hold it).
	released giveBackOutcome = iota
	// refused: the controller certainly did not release it.
	refused
	// unknown: the release may or may not have happened.
	unknown
)

func newPodPool() *podPool {
	return &podPool{slices: map[int]vnialloc.Range{}, returning: map[int]*giveBack{},
		isFree: map[uint16]bool{}, inUse: map[uint16]bool{}, changed: make(chan struct{})}
}

func (p *podPool) sliceOf(v uint16) (int, bool) {
	for i, r := range p.slices {
		if r.Contains(v) {
			return i, true
		}
	}
	return 0, false
}

// take returns a free VNI, or false and a channel closed at the next
// refill.
func (p *podPool) take() (uint16, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head < len(p.free) {
		v := p.free[p.head]
		p.head++
		if !p.isFree[v] {
			continue // dropped with its slice
		}
		delete(p.isFree, v)
		p.inUse[v] = true
		p.compact()
		return v, true, nil
	}
	return 0, false, p.changed
}

func (p *podPool) compact() {
	if p.head > 256 && p.head*2 > len(p.free) {
		p.free = append(p.free[:0], p.free[p.head:]...)
		p.head = 0
	}
}

// put returns v to the pool's tail; VNIs of slices no longer held are
// just forgotten.
func (p *podPool) put(v uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inUse[v] {
		return
	}
	delete(p.inUse, v)
	if i, ok := p.sliceOf(v); ok && !p.isFree[v] && p.returning[i] == nil {
		p.isFree[v] = true
		p.free = append(p.free, v)
	}
}

// restore marks VNIs in use, as after an agent restart.
func (p *podPool) restore(vnis []uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range vnis {
		p.inUse[v] = true
		delete(p.isFree, v)
	}
}

// setSlices makes the pool hold exactly these slices: new slices' VNIs
// become free (except those in use), dropped slices' free VNIs go away.
// A slice on its way back stays out of the free list while it is held; one
// no longer held is settled, but its index is not taken up again while a
// release of it is in flight (the release could still land after).
func (p *podPool) setSlices(held map[int]vnialloc.Range) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.slices {
		if nr, ok := held[i]; ok && nr == r {
			continue
		}
		for v := int(r.Min); v <= int(r.Max); v++ {
			delete(p.isFree, uint16(v))
		}
		delete(p.slices, i)
		if gb := p.returning[i]; gb != nil && !gb.inFlight {
			delete(p.returning, i)
		}
	}
	added := false
	idx := make([]int, 0, len(held))
	for i := range held {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if _, ok := p.slices[i]; ok || p.returning[i] != nil {
			continue
		}
		p.slices[i] = held[i]
		added = p.addFreeLocked(held[i]) || added
	}
	if added {
		p.signalLocked()
	}
}

// addFreeLocked makes r's VNIs free, except reserved ones and those in
// use or free already; it reports whether it added any.
func (p *podPool) addFreeLocked(r vnialloc.Range) bool {
	added := false
	for v := int(r.Min); v <= int(r.Max); v++ {
		u := uint16(v)
		if vnialloc.Reserved(u) || p.inUse[u] || p.isFree[u] {
			continue
		}
		p.isFree[u] = true
		p.free = append(p.free, u)
		added = true
	}
	return added
}

// signalLocked wakes the takers waiting for a change.
func (p *podPool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// sliceUse is the pool's report of one slice.
type sliceUse struct {
	allocated int
	// open: VNIs of the slice are handed out without further report.
	open bool
}

// usage returns the report of every held slice: the VNIs in use, and
// whether the slice is open (not on its way back, or to be reopened). It
// also returns the slices to reopen that it reports open: once the
// controller has answered the report, reopened frees their VNIs.
func (p *podPool) usage() (map[int]sliceUse, []pendingGiveBack) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]sliceUse, len(p.slices))
	var reopen []pendingGiveBack
	for i := range p.slices {
		gb := p.returning[i]
		out[i] = sliceUse{open: gb == nil || gb.reopen}
		if gb != nil && gb.reopen {
			reopen = append(reopen, pendingGiveBack{index: i, gb: gb})
		}
	}
	for v := range p.inUse {
		if i, ok := p.sliceOf(v); ok {
			u := out[i]
			u.allocated++
			out[i] = u
		}
	}
	return out, reopen
}

// reopened frees the VNIs of the slices a heartbeat reported open again
// (from usage) once the controller has answered it, unless they were
// settled meanwhile or are no longer held.
func (p *podPool) reopened(reported []pendingGiveBack) {
	p.mu.Lock()
	defer p.mu.Unlock()
	added := false
	for _, r := range reported {
		if p.returning[r.index] != r.gb {
			continue
		}
		delete(p.returning, r.index)
		if s, ok := p.slices[r.index]; ok && s == r.gb.r {
			added = p.addFreeLocked(s) || added
		}
	}
	if added {
		p.signalLocked()
	}
}

func (p *podPool) counts() (free, slices int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.isFree), len(p.slices)
}

// beginGiveBack chooses a slice to give back, the highest-indexed one
// with nothing in use whose release still leaves at least keep VNIs free,
// never the last slice not already on its way back, and takes its VNIs out
// of the free list in the same step: from here on none of them is handed
// out. The caller reports the call's outcome to endGiveBack.
func (p *podPool) beginGiveBack(keep int) (int, *giveBack, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	idx := make([]int, 0, len(p.slices))
	for i := range p.slices {
		if p.returning[i] == nil {
			idx = append(idx, i)
		}
	}
	if len(idx) < 2 {
		return 0, nil, false
	}
	sort.Sort(sort.Reverse(sort.IntSlice(idx)))
	for _, i := range idx {
		r := p.slices[i]
		if p.usedLocked(r) || len(p.isFree)-r.Size() < keep {
			continue
		}
		gb := &giveBack{r: r, inFlight: true}
		p.returning[i] = gb
		for v := int(r.Min); v <= int(r.Max); v++ {
			delete(p.isFree, uint16(v))
		}
		return i, gb, true
	}
	return 0, nil, false
}

func (p *podPool) usedLocked(r vnialloc.Range) bool {
	for v := range p.inUse {
		if r.Contains(v) {
			return true
		}
	}
	return false
}

// pendingGiveBack is a slice whose give-back is to be (re)tried.
type pendingGiveBack struct {
	index int
	gb    *giveBack
}

// retryGiveBacks returns the slices whose last release had an unknown
// outcome, marked in flight again.
func (p *podPool) retryGiveBacks() []pendingGiveBack {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pendingGiveBack
	for i, gb := range p.returning {
		if !gb.inFlight && !gb.reopen {
			gb.inFlight = true
			out = append(out, pendingGiveBack{index: i, gb: gb})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].index < out[b].index })
	return out
}

// endGiveBack settles slice i's give-back gb by the outcome of its call.
// An unknown outcome keeps the slice's VNIs out of the free list until a
// later release settles it, or a heartbeat says it is no longer held. A
// refusal keeps them out until a heartbeat has reported the slice open
// again (see reopened): the last report the controller has says closed.
func (p *podPool) endGiveBack(i int, gb *giveBack, o giveBackOutcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.returning[i] != gb {
		return // settled meanwhile
	}
	r, held := p.slices[i]
	held = held && r == gb.r
	switch {
	case o == unknown && held:
		gb.inFlight = false
		return
	case o == released && held:
		delete(p.slices, i)
	case o == refused && held:
		gb.inFlight, gb.reopen = false, true
		return
	}
	delete(p.returning, i)
}

func (p *podPool) setOff(off bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if off && !p.off {
		p.signalLocked()
	}
	p.off = off
}

func (p *podPool) isOff() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.off
}

package controllerclient

import (
	"sort"
	"sync"

	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// podPool is the node's local pool of pod-scoped VNIs: the VNIs of the
// slices it holds, split into free (a FIFO, so a returned VNI is reused
// last) and in use.
type podPool struct {
	mu      sync.Mutex
	slices  map[int]vnialloc.Range
	free    []uint16
	head    int
	isFree  map[uint16]bool
	inUse   map[uint16]bool
	changed chan struct{} // closed and replaced on every refill
	off     bool          // the controller has no pod pool
}

func newPodPool() *podPool {
	return &podPool{slices: map[int]vnialloc.Range{}, isFree: map[uint16]bool{}, inUse: map[uint16]bool{}, changed: make(chan struct{})}
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
	if _, ok := p.sliceOf(v); ok && !p.isFree[v] {
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
	}
	added := false
	idx := make([]int, 0, len(held))
	for i := range held {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		r := held[i]
		if _, ok := p.slices[i]; ok {
			continue
		}
		p.slices[i] = r
		for v := int(r.Min); v <= int(r.Max); v++ {
			u := uint16(v)
			if vnialloc.Reserved(u) || p.inUse[u] || p.isFree[u] {
				continue
			}
			p.isFree[u] = true
			p.free = append(p.free, u)
			added = true
		}
	}
	if added {
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// usage returns the VNIs in use per held slice (every held slice listed).
func (p *podPool) usage() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]int, len(p.slices))
	for i := range p.slices {
		out[i] = 0
	}
	for v := range p.inUse {
		if i, ok := p.sliceOf(v); ok {
			out[i]++
		}
	}
	return out
}

func (p *podPool) counts() (free, slices int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.isFree), len(p.slices)
}

// idleSlice returns a slice with nothing in use whose release still leaves
// at least keep VNIs free; never the last slice.
func (p *podPool) idleSlice(keep int) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.slices) < 2 {
		return 0, false
	}
	for i, r := range p.slices {
		used := false
		for v := range p.inUse {
			if r.Contains(v) {
				used = true
				break
			}
		}
		if !used && len(p.isFree)-r.Size() >= keep {
			return i, true
		}
	}
	return 0, false
}

func (p *podPool) setOff(off bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if off && !p.off {
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.off = off
}

func (p *podPool) isOff() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.off
}

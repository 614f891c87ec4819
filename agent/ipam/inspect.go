package ipam

import "net/netip"

// Snapshot is the allocator's state for /inspect.
type Snapshot struct {
	Pools       []PoolInfo   `json:"pools"`
	Allocations []Allocation `json:"allocations"`
}

// PoolInfo is one pool as the node holds it.
type PoolInfo struct {
	Name      string       `json:"name"`
	Prefix    netip.Prefix `json:"prefix"`
	SliceBits int          `json:"sliceBits"`
	Addresses int          `json:"addresses"`
	Free      uint64       `json:"free"`
	Slices    []SliceInfo  `json:"slices"`
}

// SliceInfo is one held slice.
type SliceInfo struct {
	Index     int          `json:"index"`
	Prefix    netip.Prefix `json:"prefix"`
	Used      int          `json:"used"`
	Fill      float64      `json:"fill"`
	Returning bool         `json:"returning,omitempty"`
}

// Inspect returns a copy of the pools, slices and addresses.
func (a *Allocator) Inspect() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out Snapshot
	count := map[string]int{}
	for _, o := range sortedKeys(a.owners) {
		al := *a.owners[o]
		out.Allocations = append(out.Allocations, al)
		count[al.Pool]++
	}
	for _, name := range a.poolNames() {
		ps := a.pools[name]
		info := PoolInfo{Name: name, Prefix: ps.Prefix, SliceBits: ps.SliceBits, Addresses: count[name], Free: ps.freeAddrs(), Slices: []SliceInfo{}}
		for _, i := range sortedKeys(ps.slices) {
			s := ps.slices[i]
			fill := 0.0
			if c := s.capacity(ps.Pool); c > 0 {
				fill = float64(s.used) / float64(c)
			}
			info.Slices = append(info.Slices, SliceInfo{Index: i, Prefix: s.Prefix, Used: s.used, Fill: fill, Returning: s.returning})
		}
		out.Pools = append(out.Pools, info)
	}
	return out
}

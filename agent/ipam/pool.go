package ipam

import (
	"fmt"
	"math"
	"net/netip"
)

// maxSliceBits bounds how many slice index bits a pool may have, as the
// controller bounds its slices.
const maxSliceBits = 20

// Pool is an IP pool: Prefix cut into slices of /SliceBits. The whole
// prefix is one network: every address carries its length.
type Pool struct {
	Name      string       `json:"name"`
	Prefix    netip.Prefix `json:"prefix"`
	SliceBits int          `json:"sliceBits"`
}

// Slice is one slice of a pool that the node holds.
type Slice struct {
	Pool   string       `json:"pool"`
	Index  int          `json:"index"`
	Prefix netip.Prefix `json:"prefix"`
}

// Validate checks that the pool can be sliced as it says.
func (p Pool) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("ip pool with no name")
	case !p.Prefix.IsValid() || p.Prefix != p.Prefix.Masked():
		return fmt.Errorf("ip pool %s: prefix %s is not a network prefix", p.Name, p.Prefix)
	case p.SliceBits < p.Prefix.Bits() || p.SliceBits > p.Prefix.Addr().BitLen() || p.SliceBits-p.Prefix.Bits() > maxSliceBits:
		return fmt.Errorf("ip pool %s: slices of /%d do not fit %s", p.Name, p.SliceBits, p.Prefix)
	}
	return nil
}

// Slices is the number of slices of the pool.
func (p Pool) Slices() int { return 1 << (p.SliceBits - p.Prefix.Bits()) }

// SliceIndex returns the index of the slice holding a, or false when a is
// outside the pool.
func (p Pool) SliceIndex(a netip.Addr) (int, bool) {
	if !p.Prefix.Contains(a) {
		return 0, false
	}
	b := a.AsSlice()
	i := 0
	for bit := p.Prefix.Bits(); bit < p.SliceBits; bit++ {
		i = i<<1 | int(b[bit/8]>>(7-bit%8)&1)
	}
	return i, true
}

// SlicePrefix returns slice i's prefix.
func (p Pool) SlicePrefix(i int) netip.Prefix {
	b := p.Prefix.Addr().AsSlice()
	for k, bit := 0, p.SliceBits-1; bit >= p.Prefix.Bits(); k, bit = k+1, bit-1 {
		if i>>k&1 == 1 {
			b[bit/8] |= 1 << (7 - bit%8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.SliceBits)
}

// Usable reports whether a may be handed out: every address of the pool
// but its first (the network's, or IPv6's subnet-router anycast) and, for
// IPv4, its last (broadcast).
func (p Pool) Usable(a netip.Addr) bool {
	if !p.Prefix.Contains(a) || a == p.Prefix.Addr() {
		return false
	}
	return !a.Is4() || a != lastAddr(p.Prefix)
}

// overlaps returns the smaller of two prefixes when one holds the other.
func within(a, b netip.Prefix) (netip.Prefix, bool) {
	if !a.Overlaps(b) {
		return netip.Prefix{}, false
	}
	if a.Bits() >= b.Bits() {
		return a, true
	}
	return b, true
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for bit := p.Bits(); bit < len(b)*8; bit++ {
		b[bit/8] |= 1 << (7 - bit%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// size is the number of addresses of p, saturated at MaxUint64.
func size(p netip.Prefix) uint64 {
	host := p.Addr().BitLen() - p.Bits()
	if host >= 64 {
		return math.MaxUint64
	}
	return 1 << host
}

// heldSlice is a slice in memory: its users and a next-fit cursor, so
// that a freed address is not handed out again at once (neighbour caches
// of the other pods still name its old MAC).
type heldSlice struct {
	Slice
	returning bool
	used      int
	next      netip.Addr
}

// capacity is the number of usable addresses of the slice.
func (s *heldSlice) capacity(p Pool) uint64 {
	n := size(s.Prefix)
	for _, a := range []netip.Addr{p.Prefix.Addr(), lastAddr(p.Prefix)} {
		if s.Prefix.Contains(a) && !p.Usable(a) && n != math.MaxUint64 {
			n--
		}
	}
	return n
}

// free returns how many usable addresses of the slice are free.
func (s *heldSlice) free(p Pool) uint64 { return s.capacity(p) - uint64(s.used) }

// findFree returns a free address of the slice inside r (a prefix within
// the slice), next-fit from the slice's cursor when it lies in r. It
// looks at no more than used+2 addresses past the unusable ones.
func (s *heldSlice) findFree(p Pool, r netip.Prefix, taken func(netip.Addr) bool) (netip.Addr, bool) {
	start := r.Addr()
	if s.next.IsValid() && r.Contains(s.next) {
		start = s.next
	}
	budget := uint64(s.used) + 3
	limit := size(r)
	a := start
	for n := uint64(0); n < limit && budget > 0; n++ {
		if p.Usable(a) {
			if !taken(a) {
				return a, true
			}
			budget--
		}
		a = a.Next()
		if !a.IsValid() || !r.Contains(a) {
			a = r.Addr()
		}
	}
	return netip.Addr{}, false
}

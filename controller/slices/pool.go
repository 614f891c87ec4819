package slices

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// MaxSlices bounds the slices of one pool, so that a /8 cut into /32s
// cannot exhaust memory.
const MaxSlices = 1 << 20

// PodVNIPool is the name of the pool of pod-scoped VNIs.
const PodVNIPool = "pod-vni"

// ErrBadPool is wrapped by errors about a pool's specification.
var ErrBadPool = errors.New("bad pool")

var poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// PoolSpec describes a pool: exactly one of VNIs or Prefix is set.
type PoolSpec struct {
	// Name identifies the pool, a DNS label.
	Name string
	// VNIs is the range of a VNI pool.
	VNIs vnialloc.Range
	// Prefix is the range of an IP pool.
	Prefix netip.Prefix
	// SliceSize is the number of VNIs per slice for a VNI pool, or the
	// prefix length of each slice for an IP pool.
	SliceSize int
}

// Validate returns an error wrapping ErrBadPool unless the spec is usable.
func (p PoolSpec) Validate() error {
	if !poolName.MatchString(p.Name) {
		return fmt.Errorf("%w: name %q is not a DNS label", ErrBadPool, p.Name)
	}
	isVNI, isIP := !p.VNIs.Empty(), p.Prefix.IsValid()
	switch {
	case isVNI == isIP:
		return fmt.Errorf("%w %s: want exactly one of a vni range and an ip prefix", ErrBadPool, p.Name)
	case isVNI:
		if err := p.VNIs.Validate(); err != nil {
			return fmt.Errorf("%w %s: %w", ErrBadPool, p.Name, err)
		}
		if p.SliceSize < 1 || p.SliceSize > p.VNIs.Size() {
			return fmt.Errorf("%w %s: slice size %d outside 1-%d", ErrBadPool, p.Name, p.SliceSize, p.VNIs.Size())
		}
	default:
		if p.Prefix != p.Prefix.Masked() {
			return fmt.Errorf("%w %s: %s has host bits set (did you mean %s?)", ErrBadPool, p.Name, p.Prefix, p.Prefix.Masked())
		}
		if p.SliceSize < p.Prefix.Bits() || p.SliceSize > p.Prefix.Addr().BitLen() {
			return fmt.Errorf("%w %s: slice prefix /%d outside /%d-/%d", ErrBadPool, p.Name, p.SliceSize, p.Prefix.Bits(), p.Prefix.Addr().BitLen())
		}
		if p.SliceSize-p.Prefix.Bits() > 20 {
			return fmt.Errorf("%w %s: %s in /%d slices is more than %d slices", ErrBadPool, p.Name, p.Prefix, p.SliceSize, MaxSlices)
		}
	}
	return nil
}

// Count returns the number of slices; the last slice of a VNI pool may be
// shorter than SliceSize.
func (p PoolSpec) Count() int {
	if !p.VNIs.Empty() {
		if p.SliceSize < 1 {
			return 0
		}
		return (p.VNIs.Size() + p.SliceSize - 1) / p.SliceSize
	}
	if !p.Prefix.IsValid() {
		return 0
	}
	return 1 << (p.SliceSize - p.Prefix.Bits())
}

// VNISlice returns the VNIs of slice i of a VNI pool.
func (p PoolSpec) VNISlice(i int) vnialloc.Range {
	if p.VNIs.Empty() || i < 0 || i >= p.Count() {
		return vnialloc.Range{}
	}
	first := int(p.VNIs.Min) + i*p.SliceSize
	last := min(first+p.SliceSize-1, int(p.VNIs.Max))
	return vnialloc.Range{Min: uint16(first), Max: uint16(last)}
}

// PrefixSlice returns the prefix of slice i of an IP pool.
func (p PoolSpec) PrefixSlice(i int) netip.Prefix {
	if !p.Prefix.IsValid() || i < 0 || i >= p.Count() {
		return netip.Prefix{}
	}
	a := p.Prefix.Addr().AsSlice()
	n := new(big.Int).SetBytes(a)
	off := new(big.Int).Lsh(big.NewInt(int64(i)), uint(p.Prefix.Addr().BitLen()-p.SliceSize))
	n.Add(n, off)
	b := n.FillBytes(make([]byte, len(a)))
	addr, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(addr, p.SliceSize)
}

// SliceString formats slice i as "2048-2111" or "10.1.2.0/24".
func (p PoolSpec) SliceString(i int) string {
	if !p.VNIs.Empty() {
		return p.VNISlice(i).String()
	}
	return p.PrefixSlice(i).String()
}

// String formats the spec as "NAME=vni:MIN-MAX/SIZE" for a VNI pool and
// "NAME=PREFIX/LEN" for an IP pool (e.g. "hsn0=10.150.0.0/16/24"), as
// ParsePool reads it back. The controller stores it to notice range
// changes, and lists it to agents: its form must not change.
func (p PoolSpec) String() string {
	if !p.VNIs.Empty() {
		return fmt.Sprintf("%s=vni:%s/%d", p.Name, p.VNIs, p.SliceSize)
	}
	return fmt.Sprintf("%s=%s/%d", p.Name, p.Prefix, p.SliceSize)
}

// Capacity returns how many ids (VNIs or addresses, capped at 2^62) the
// pool holds, for fill metrics.
func (p PoolSpec) Capacity() float64 {
	if !p.VNIs.Empty() {
		return float64(p.VNIs.Size())
	}
	return float64(uint64(1) << min(62, p.Prefix.Addr().BitLen()-p.Prefix.Bits()))
}

// ParseIPPool parses "NAME=PREFIX:/LEN", e.g. "hsn0=10.150.0.0/16:/24".
// Errors wrap ErrBadPool.
func ParseIPPool(s string) (PoolSpec, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	cut := strings.LastIndex(rest, ":/")
	if !ok || cut < 0 {
		return PoolSpec{}, fmt.Errorf("%w %q: want NAME=PREFIX:/LEN such as hsn0=10.150.0.0/16:/24", ErrBadPool, s)
	}
	pfx, size := rest[:cut], rest[cut+2:]
	prefix, err := netip.ParsePrefix(pfx)
	if err != nil {
		return PoolSpec{}, fmt.Errorf("%w %q: %w", ErrBadPool, s, err)
	}
	n, err := strconv.Atoi(size)
	if err != nil {
		return PoolSpec{}, fmt.Errorf("%w %q: slice length: %w", ErrBadPool, s, err)
	}
	p := PoolSpec{Name: name, Prefix: prefix, SliceSize: n}
	return p, p.Validate()
}

// ParsePool parses a pool as [PoolSpec.String] writes it,
// "NAME=vni:MIN-MAX/SIZE" or "NAME=PREFIX/LEN", and also the flag form
// of [ParseIPPool], "NAME=PREFIX:/LEN". The range ends at the last "/"
// (less a ":" before it): an IPv6 prefix has colons, and may end in "::"
// before its own "/". The spec must be valid. Errors wrap ErrBadPool.
func ParsePool(s string) (PoolSpec, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	cut := strings.LastIndex(rest, "/")
	if !ok || cut < 0 {
		return PoolSpec{}, fmt.Errorf("%w %q: want NAME=vni:MIN-MAX/SIZE or NAME=PREFIX/LEN", ErrBadPool, s)
	}
	n, err := strconv.Atoi(rest[cut+1:])
	if err != nil {
		return PoolSpec{}, fmt.Errorf("%w %q: slice size: %w", ErrBadPool, s, err)
	}
	p := PoolSpec{Name: name, SliceSize: n}
	if vnis, isVNI := strings.CutPrefix(rest[:cut], "vni:"); isVNI {
		if p.VNIs, err = vnialloc.ParseRange(vnis); err != nil {
			return PoolSpec{}, fmt.Errorf("%w %q: %w", ErrBadPool, s, err)
		}
		if p.VNIs.Empty() {
			return PoolSpec{}, fmt.Errorf("%w %q: empty vni range", ErrBadPool, s)
		}
	} else if p.Prefix, err = netip.ParsePrefix(strings.TrimSuffix(rest[:cut], ":")); err != nil {
		return PoolSpec{}, fmt.Errorf("%w %q: %w", ErrBadPool, s, err)
	}
	return p, p.Validate()
}

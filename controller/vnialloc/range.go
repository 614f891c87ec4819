package vnialloc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Range is an inclusive range of VNIs. The zero Range is empty.
type Range struct {
	Min, Max uint16
}

// ErrBadRange is wrapped by [ParseRange] and [New] for a malformed range.
var ErrBadRange = errors.New("bad vni range")

// ParseRange parses "MIN-MAX" (inclusive, 1 <= MIN <= MAX <= 65535) or a
// single "N". An empty string is the empty Range. Errors wrap ErrBadRange.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Range{}, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	min, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	max, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("%w %q: want MIN-MAX within 1-65535", ErrBadRange, s)
	}
	r := Range{Min: uint16(min), Max: uint16(max)}
	if err := r.Validate(); err != nil {
		return Range{}, err
	}
	return r, nil
}

// Validate returns an error wrapping ErrBadRange unless r is empty or
// 1 <= Min <= Max.
func (r Range) Validate() error {
	if r.Empty() {
		return nil
	}
	if r.Min == 0 || r.Min > r.Max {
		return fmt.Errorf("%w %s: want 1 <= min <= max", ErrBadRange, r)
	}
	return nil
}

// Empty reports whether r holds no VNI.
func (r Range) Empty() bool { return r == Range{} }

// Size returns the number of VNIs in r.
func (r Range) Size() int {
	if r.Empty() {
		return 0
	}
	return int(r.Max) - int(r.Min) + 1
}

// Contains reports whether v lies in r.
func (r Range) Contains(v uint16) bool { return !r.Empty() && v >= r.Min && v <= r.Max }

// Overlaps reports whether r and o share a VNI.
func (r Range) Overlaps(o Range) bool {
	return !r.Empty() && !o.Empty() && r.Min <= o.Max && o.Min <= r.Max
}

// String formats r as ParseRange reads it.
func (r Range) String() string {
	if r.Empty() {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

// Reserved reports whether v is never handed out: 0 is not a VNI, and 1
// and 10 belong to the CXI driver's default service.
func Reserved(v uint16) bool { return v == 0 || v == 1 || v == 10 }

package slices

import (
	"errors"
	"testing"
)

func FuzzParseIPPool(f *testing.F) {
	for _, s := range []string{"hsn0=10.150.0.0/16:/24", "hsn1=fd00:1::/48:/64", "x=0.0.0.0/0:/20", "a=10.0.0.0/8:/32", "=:/", "a=b:/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseIPPool(s)
		if err != nil {
			return
		}
		n := p.Count()
		if n < 1 || n > MaxSlices {
			t.Fatalf("%q: %d slices", s, n)
		}
		last := p.PrefixSlice(n - 1)
		if !last.IsValid() || !p.Prefix.Contains(last.Addr()) || p.PrefixSlice(n).IsValid() {
			t.Fatalf("%q: last slice %v", s, last)
		}
	})
}

func FuzzParsePool(f *testing.F) {
	for _, s := range []string{"hsn0=10.150.0.0/16/24", "hsn0=10.150.0.0/16:/24", "hsn1=fd00:1::/48/64", "pod-vni=vni:2048-4095/64",
		"p=vni:1-65535/1", "=/", "a=vni:/", "a=1/2/3", "a=vni:5-4/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePool(s)
		if err != nil {
			if !errors.Is(err, ErrBadPool) {
				t.Fatalf("%q: error %v does not wrap ErrBadPool", s, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid spec %+v: %v", s, p, err)
		}
		if n := p.Count(); n < 1 || n > MaxSlices {
			t.Fatalf("%q: %d slices", s, n)
		}
		again, err := ParsePool(p.String())
		if err != nil || again != p {
			t.Fatalf("%q: String() %q parses to %+v, %v", s, p.String(), again, err)
		}
	})
}

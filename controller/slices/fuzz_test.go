package slices

import "testing"

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

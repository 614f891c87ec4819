package vnialloc

import "testing"

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"1024-65535", "1-1", "7", "", "0-10", "65535-65536", "a-b", "-5", "5-", " 3 - 4 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if r.Validate() != nil {
			t.Fatalf("ParseRange(%q) = %v, which does not validate", s, r)
		}
		if back, err := ParseRange(r.String()); err != nil || back != r {
			t.Fatalf("round trip of %v: %v %v", r, back, err)
		}
	})
}

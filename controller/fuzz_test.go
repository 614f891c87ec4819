package controller

import "testing"

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"", "job", "none", "pod", "true", "false", "claim:shared", "claim:", "claim:Bad_Name", "claim:a.b-c", " pod "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		if p.Mode == ModeClaim && !validSubdomain(p.Claim) {
			t.Fatalf("ParsePolicy(%q) accepted claim %q", s, p.Claim)
		}
		if p.Mode != ModeClaim && p.Claim != "" {
			t.Fatalf("ParsePolicy(%q) = %+v", s, p)
		}
	})
}

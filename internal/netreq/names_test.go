package netreq

import (
	"regexp"
	"strings"
	"testing"
)

// The hand-written name checks accept exactly what the patterns they
// replace accept.
func TestNamesMatchTheirPatterns(t *testing.T) {
	pool := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	netdev := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)
	cases := []string{"", "a", "-", "a-", "-a", "a-b", "hsn0", "HSN0", "hsn_0", "_hsn", ".x", "x.", "a.b-c_d",
		"0", "eth0.100", "x y", "ü", strings.Repeat("a", 15), strings.Repeat("a", 16), strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a", 62) + "-", "a\n"}
	for _, s := range cases {
		if got, want := isPoolName(s), pool.MatchString(s); got != want {
			t.Errorf("isPoolName(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := isNetdevName(s), netdev.MatchString(s); got != want {
			t.Errorf("isNetdevName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}

func FuzzNamesMatchTheirPatterns(f *testing.F) {
	pool := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	netdev := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)
	for _, s := range []string{"hsn0", "a-b", "x.y_z", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if isPoolName(s) != pool.MatchString(s) || isNetdevName(s) != netdev.MatchString(s) {
			t.Fatalf("%q: pool %v/%v netdev %v/%v", s, isPoolName(s), pool.MatchString(s), isNetdevName(s), netdev.MatchString(s))
		}
	})
}

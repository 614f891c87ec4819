package owner

import "testing"

func FuzzParseKinds(f *testing.F) {
	f.Add(FormatKinds(DefaultKinds))
	for _, s := range []string{"v1/Pod=pods", "a/b/c=d,e/f=g", "", ",,", "a/b/c/d=e", "=x", "a/=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kinds, err := ParseKinds(s)
		if err != nil {
			return
		}
		again, err := ParseKinds(FormatKinds(kinds))
		if err != nil || len(again) != len(kinds) {
			t.Fatalf("round trip of %q: %v %v", s, again, err)
		}
	})
}

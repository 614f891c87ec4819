package pin

import (
	"errors"
	"strings"
	"testing"
)

func TestFileName(t *testing.T) {
	long := strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253) // the longest pod key
	tests := []struct {
		holder, want string
	}{
		{"default/web-0", "default%2Fweb-0"},
		{"claim:1f2e-3d", "claim%3A1f2e-3d"},
		{"..", "%2E%2E"},
		{".tmp", "%2Etmp"},
		{"a+b%c", "a%2Bb%25c"},
		{"\x00\xff", "%00%FF"},
		{long, strings.Repeat("n", 63) + "%2F" + strings.Repeat("p", 250-66) + "+/" + strings.Repeat("p", 253-(250-66))},
	}
	for _, tt := range tests {
		got, err := FileName(tt.holder)
		if err != nil || got != tt.want {
			t.Errorf("FileName(%q) = %q, %v; want %q", tt.holder, got, err, tt.want)
			continue
		}
		back, err := HolderOf(got)
		if err != nil || back != tt.holder {
			t.Errorf("HolderOf(%q) = %q, %v; want %q", got, back, err, tt.holder)
		}
	}
	if _, err := FileName(""); !errors.Is(err, ErrBadHolder) {
		t.Errorf("FileName(\"\") = %v, want ErrBadHolder", err)
	}
}

// Every name FileName never returns is refused, so that no two files
// stand for one holder and no temporary file is taken for a pin.
func TestHolderOfRefusesOtherNames(t *testing.T) {
	for _, name := range []string{
		"",
		"default%2fweb-0",              // lower-case hex
		"%41",                          // escapes a plain byte
		"a%2",                          // cut escape
		"a%",                           // stray '%'
		"a.tmp",                        // a temporary file
		"a+",                           // a directory alone
		"a+/b",                         // a directory part shorter than 250
		strings.Repeat("a", 251),       // a file part longer than 250
		strings.Repeat("a", 250) + "/", // an empty last part
		"a/b",                          // a directory without its mark
	} {
		if h, err := HolderOf(name); !errors.Is(err, ErrBadHolder) {
			t.Errorf("HolderOf(%q) = %q, %v; want ErrBadHolder", name, h, err)
		}
	}
}

func FuzzFileName(f *testing.F) {
	f.Add("default/web-0")
	f.Add("claim:" + strings.Repeat("ab/", 200))
	f.Fuzz(func(t *testing.T, holder string) {
		name, err := FileName(holder)
		if holder == "" {
			if err == nil {
				t.Fatal("empty holder accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(name, "/") {
			if part == "" || len(part)+len(tmpSuffix) > 255 || part[0] == '.' || strings.Contains(part, ".") {
				t.Fatalf("FileName(%q) = %q: unsafe component %q", holder, name, part)
			}
		}
		back, err := HolderOf(name)
		if err != nil || back != holder {
			t.Fatalf("HolderOf(FileName(%q)) = %q, %v", holder, back, err)
		}
	})
}

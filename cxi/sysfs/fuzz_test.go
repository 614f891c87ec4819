package sysfs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
	"unicode/utf8"
)

// Every parser has a fuzz target. Besides "never panics", each checks a
// property of what it accepts: a value it returns prints back to text it
// accepts again, and a range check holds.

var numericSeeds = []string{"0", "1\n", "-1\n", "200000\n", "0x5490\n", "0xffffffff\n", "2147483648",
	"4294967296", " 7 \n", "+1", "", "\n", "\x01garbage\xff\n", "9999999999999999999999", "0x", "1e3"}

func addSeeds(f *testing.F, seeds ...[]string) {
	for _, list := range seeds {
		for _, s := range list {
			f.Add(s)
		}
	}
}

// checkInvalid fails when a rejected input's error does not wrap
// ErrInvalidValue.
func checkInvalid(t *testing.T, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("parse(%q): error %v does not wrap ErrInvalidValue", in, err)
	}
}

func FuzzParseHex32(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"0X1f", "ffffffff", "0x100000000"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseHex32(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if back, err := parseHex32(fmt.Sprintf("0x%x\n", v)); err != nil || back != v {
			t.Fatalf("parseHex32(%q) = %#x, which does not round-trip: %#x, %v", s, v, back, err)
		}
	})
}

func FuzzParseDecimal(f *testing.F) {
	addSeeds(f, numericSeeds)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseDecimal(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v < -1<<31 || v > 1<<31-1 {
			t.Fatalf("parseDecimal(%q) = %d, beyond a C int", s, v)
		}
		if back, err := parseDecimal(strconv.Itoa(v) + "\n"); err != nil || back != v {
			t.Fatalf("parseDecimal(%q) = %d, which does not round-trip", s, v)
		}
	})
}

func FuzzParseUint32(f *testing.F) {
	addSeeds(f, numericSeeds)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseUint32(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if back, err := parseUint32(strconv.FormatUint(uint64(v), 10) + "\n"); err != nil || back != v {
			t.Fatalf("parseUint32(%q) = %d, which does not round-trip", s, v)
		}
	})
}

func FuzzParseCount(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"2048\n", "16384\n"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCount(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v < 0 {
			t.Fatalf("parseCount(%q) = %d", s, v)
		}
	})
}

func FuzzParseBit(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"2", "true", "01"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseBit(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if want := strings.TrimSpace(s) == "1"; v != want {
			t.Fatalf("parseBit(%q) = %v", s, v)
		}
	})
}

func FuzzParseSpeed(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"100000\n", "-2"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseSpeed(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v < -1 {
			t.Fatalf("parseSpeed(%q) = %d", s, v)
		}
	})
}

func FuzzParsePIDBits(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"9\n", "6\n", "17", "18"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parsePIDBits(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v < 1 || v > maxPIDBits {
			t.Fatalf("parsePIDBits(%q) = %d", s, v)
		}
	})
}

func FuzzParseCassiniVersion(f *testing.F) {
	addSeeds(f, []string{"1.0\n", "1.1\n", "2.0\n", "unknown\n", "2.0.0", ""})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCassiniVersion(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v != "1.0" && v != "1.1" && v != "2.0" {
			t.Fatalf("parseCassiniVersion(%q) = %q", s, v)
		}
	})
}

func FuzzParseText(f *testing.F) {
	addSeeds(f, []string{"400Gb 2P NIC Mezz\n", "1.6.0.326\n", "", "\x01garbage\xff\n", "two\nlines", "ünïcode\n"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseText(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 || strings.TrimSpace(v) != v {
			t.Fatalf("parseText(%q) = %q", s, v)
		}
		if back, err := parseText(v + "\n"); err != nil || back != v {
			t.Fatalf("parseText(%q) = %q, which does not round-trip", s, v)
		}
	})
}

func FuzzParseCXIName(f *testing.F) {
	addSeeds(f, []string{"cxi0", "cxi17", "cxi", "cxi01", "cxi-1", "hsn0", "cxi99999999999999999999", "cxi1048577"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCXIName(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if "cxi"+strconv.Itoa(v) != s || v < 0 || v > maxCXIIndex {
			t.Fatalf("parseCXIName(%q) = %d", s, v)
		}
	})
}

func FuzzParseMAC(f *testing.F) {
	addSeeds(f, []string{"02:00:00:00:54:90\n", "02-00-00-00-54-90", "0200.0000.5490", "", "ff:ff:ff:ff:ff:ff", "02:00:00:00:54:9G"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseMAC(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if len(v) != 6 || v.String() != strings.ToLower(strings.TrimSpace(s)) {
			t.Fatalf("parseMAC(%q) = %v", s, v)
		}
	})
}

func FuzzParseOperState(f *testing.F) {
	addSeeds(f, []string{"up\n", "down\n", "lowerlayerdown\n", "dormant", "UP", ""})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseOperState(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v != strings.TrimSpace(s) {
			t.Fatalf("parseOperState(%q) = %q", s, v)
		}
	})
}

func FuzzParseAddrAssignType(f *testing.F) {
	addSeeds(f, numericSeeds, []string{"3\n", "4"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseAddrAssignType(s)
		if err != nil {
			checkInvalid(t, s, err)
			return
		}
		if v < AddrAssignPermanent || v > AddrAssignSet {
			t.Fatalf("parseAddrAssignType(%q) = %d", s, v)
		}
	})
}

// FuzzDiscover replaces one file's content or one link's target in the
// two-nics tree and checks that discovery still finds both NICs, reports
// every problem as an *AttrError, and never calls a NIC with problems
// healthy.
func FuzzDiscover(f *testing.F) {
	base := loadMapFS(f, "testdata/two-nics")
	var editable []string
	for p, file := range base {
		if !file.Mode.IsDir() {
			editable = append(editable, p)
		}
	}
	slices.Sort(editable)
	for i, p := range editable {
		switch {
		case strings.HasSuffix(p, "/nid"), strings.HasSuffix(p, "/address"), strings.HasSuffix(p, "/device"):
			f.Add(uint16(i), []byte("\x01garbage\xff\n"))
			f.Add(uint16(i), []byte("../../../0000:4b:00.0"))
			f.Add(uint16(i), []byte(""))
		}
	}
	f.Fuzz(func(t *testing.T, which uint16, content []byte) {
		fsys := make(fstest.MapFS, len(base))
		maps.Copy(fsys, base)
		p := editable[int(which)%len(editable)]
		edited := *fsys[p]
		edited.Data = content
		fsys[p] = &edited

		d, err := Discover(fsys)
		if err != nil {
			t.Fatalf("Discover with %s = %q: %v", p, content, err)
		}
		if len(d.NICs) != 2 {
			t.Fatalf("Discover with %s = %q: %d NICs", p, content, len(d.NICs))
		}
		for _, n := range d.NICs {
			for _, perr := range n.Problems {
				var ae *AttrError
				if !errors.As(perr, &ae) {
					t.Fatalf("problem %v is not an *AttrError", perr)
				}
			}
			if n.Healthy && len(n.Problems) > 0 {
				t.Fatalf("%s healthy with problems %v", n.Name, n.Problems)
			}
			_, _ = ReadLinkState(fsys, n)
		}
	})
}

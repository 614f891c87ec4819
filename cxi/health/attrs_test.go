package health

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseLink(t *testing.T) {
	tests := []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"1\n", true, false},
		{"0\n", false, false},
		{" 1 ", true, false},
		{"", false, true},
		{"\n", false, true},
		{"2\n", false, true},
		{"up\n", false, true},
		{"-1\n", false, true},
	}
	for _, tt := range tests {
		got, err := parseLink([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseLink(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("parseLink(%q) error %v does not wrap ErrMalformed", tt.in, err)
		}
	}
}

func TestParseRetryHandler(t *testing.T) {
	tests := []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"0\n", false, false},
		{"1\n", true, false},
		{"2047\n", true, false},
		{"4294967295\n", true, false},
		{"4294967296\n", false, true},
		{"-1\n", false, true},
		{"0x1\n", false, true},
		{"", false, true},
	}
	for _, tt := range tests {
		got, err := parseRetryHandler([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseRetryHandler(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseSpeed(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"200000\n", 200000, false},
		{"100000\n", 100000, false},
		{"50000\n", 50000, false},
		{"0\n", 0, false},          // no port
		{"-1\n", 0, false},         // SPEED_UNKNOWN
		{"4294967295\n", 0, false}, // SPEED_UNKNOWN printed unsigned
		{"2147483647\n", 2147483647, false},
		{"2147483648\n", 0, true},
		{"-2\n", 0, true},
		{"fast\n", 0, true},
		{"", 0, true},
		{strings.Repeat("1", maxAttrLen+1), 0, true},
	}
	for _, tt := range tests {
		got, err := parseSpeed([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSpeed(%.20q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseOperState(t *testing.T) {
	for _, s := range operStates {
		got, err := parseOperState([]byte(s + "\n"))
		if err != nil || got != s {
			t.Errorf("parseOperState(%q) = %q, %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "UP", "running", "up down", "1"} {
		if got, err := parseOperState([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseOperState(%q) = %q, %v; want ErrMalformed", bad, got, err)
		}
	}
}

func TestParseCounter(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"0\n", 0, false},
		{"18446744073709551615\n", 1<<64 - 1, false},
		{"18446744073709551616\n", 0, true},
		{"-1", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := parseCounter([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseCounter(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// The fuzz targets check that no input panics, that every error wraps
// ErrMalformed, and that accepted values are the ones the kernel prints.

func FuzzParseLink(f *testing.F) {
	for _, s := range []string{"1\n", "0\n", "", "2", " 1 ", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		up, err := parseLink(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if want := strings.TrimSpace(string(b)) == "1"; up != want {
			t.Fatalf("parseLink(%q) = %v", b, up)
		}
	})
}

func FuzzParseRetryHandler(f *testing.F) {
	for _, s := range []string{"0\n", "1\n", "4294967295\n", "-1", "", "00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		running, err := parseRetryHandler(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		v, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if perr != nil || running != (v != 0) {
			t.Fatalf("parseRetryHandler(%q) = %v", b, running)
		}
	})
}

func FuzzParseSpeed(f *testing.F) {
	for _, s := range []string{"200000\n", "-1\n", "4294967295\n", "0", "", "1e5", "+5"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseSpeed(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if v < 0 {
			t.Fatalf("parseSpeed(%q) = %d", b, v)
		}
	})
}

func FuzzParseOperState(f *testing.F) {
	for _, s := range append(operStates[:], "", "UP\n", "up\x00") {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseOperState(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if !slices.Contains(operStates[:], s) {
			t.Fatalf("parseOperState(%q) = %q", b, s)
		}
	})
}

func FuzzParseCounter(f *testing.F) {
	for _, s := range []string{"0\n", "18446744073709551615\n", "-1", "", "1 2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseCounter(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if strconv.FormatUint(v, 10) != strings.TrimLeft(strings.TrimSpace(string(b)), "0") && v != 0 {
			t.Fatalf("parseCounter(%q) = %d", b, v)
		}
	})
}

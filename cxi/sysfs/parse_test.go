package sysfs

import (
	"errors"
	"io/fs"
	"net"
	"reflect"
	"testing"
)

// parseCase is one input to a parser: want is the value, or wantErr.
type parseCase[T any] struct {
	in      string
	want    T
	wantErr bool
}

func runParse[T any](t *testing.T, name string, parse func(string) (T, error), cases []parseCase[T]) {
	t.Helper()
	for _, c := range cases {
		got, err := parse(c.in)
		if c.wantErr {
			if err == nil {
				t.Errorf("%s(%q) = %v, want an error", name, c.in, got)
			} else if !errors.Is(err, ErrInvalidValue) {
				t.Errorf("%s(%q) error %v does not wrap ErrInvalidValue", name, c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s(%q) error: %v", name, c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s(%q) = %v, want %v", name, c.in, got, c.want)
		}
	}
}

func TestParseHex32(t *testing.T) {
	runParse(t, "parseHex32", parseHex32, []parseCase[uint32]{
		{in: "0x5490\n", want: 0x5490},
		{in: "0xffffffff\n", want: 0xffffffff}, // CXI_INVALID_NID until set
		{in: "0XABC", want: 0xabc},
		{in: "1f\n", want: 0x1f}, // sscanf("%x") takes no prefix too
		{in: " 0x0 \n", want: 0},
		{in: "0x100000000\n", wantErr: true},
		{in: "0x\n", wantErr: true},
		{in: "", wantErr: true},
		{in: "\n", wantErr: true},
		{in: "0xg\n", wantErr: true},
		{in: "-0x1\n", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "0x1_0", wantErr: true},
		{in: "0x1 0x2", wantErr: true},
	})
}

func TestParseDecimal(t *testing.T) {
	runParse(t, "parseDecimal", parseDecimal, []parseCase[int]{
		{in: "200000\n", want: 200000},
		{in: "-1\n", want: -1},
		{in: "0", want: 0},
		{in: "2147483647", want: 2147483647},
		{in: "2147483648", wantErr: true}, // beyond a C int
		{in: "0x10", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "", wantErr: true},
		{in: "12 34", wantErr: true},
	})
}

func TestParseUint32(t *testing.T) {
	runParse(t, "parseUint32", parseUint32, []parseCase[uint32]{
		{in: "7\n", want: 7},
		{in: "0\n", want: 0},
		{in: "4294967295", want: 4294967295},
		{in: "4294967296", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "x", wantErr: true},
	})
}

func TestParseCount(t *testing.T) {
	runParse(t, "parseCount", parseCount, []parseCase[int]{
		{in: "2048\n", want: 2048},
		{in: "0\n", want: 0},
		{in: "-1\n", wantErr: true},
		{in: "many\n", wantErr: true},
	})
}

func TestParseBit(t *testing.T) {
	runParse(t, "parseBit", parseBit, []parseCase[bool]{
		{in: "1\n", want: true},
		{in: "0\n", want: false},
		{in: "2\n", wantErr: true},
		{in: "up\n", wantErr: true},
		{in: "", wantErr: true},
	})
}

func TestParseSpeed(t *testing.T) {
	runParse(t, "parseSpeed", parseSpeed, []parseCase[int]{
		{in: "200000\n", want: 200000},
		{in: "-1\n", want: -1}, // SPEED_UNKNOWN
		{in: "0\n", want: 0},
		{in: "-2\n", wantErr: true},
		{in: "200G\n", wantErr: true},
	})
}

func TestParsePIDBits(t *testing.T) {
	runParse(t, "parsePIDBits", parsePIDBits, []parseCase[int]{
		{in: "9\n", want: 9},
		{in: "6\n", want: 6},
		{in: "0\n", wantErr: true},
		{in: "18\n", wantErr: true},
	})
}

func TestParseCassiniVersion(t *testing.T) {
	runParse(t, "parseCassiniVersion", parseCassiniVersion, []parseCase[string]{
		{in: "2.0\n", want: "2.0"},
		{in: "1.1\n", want: "1.1"},
		{in: "1.0\n", want: "1.0"},
		{in: "unknown\n", wantErr: true},
		{in: "3.0\n", wantErr: true},
		{in: "", wantErr: true},
	})
}

func TestParseText(t *testing.T) {
	runParse(t, "parseText", parseText, []parseCase[string]{
		{in: "400Gb 2P NIC Mezz\n", want: "400Gb 2P NIC Mezz"},
		{in: "1.6.0.326\n", want: "1.6.0.326"},
		{in: "", want: ""}, // the driver prints nothing when it has no value
		{in: "\x01garbage\xff\n", wantErr: true},
		{in: "a\x00b", wantErr: true},
		{in: "two\nlines\n", wantErr: true},
	})
}

func TestParseCXIName(t *testing.T) {
	runParse(t, "parseCXIName", parseCXIName, []parseCase[int]{
		{in: "cxi0", want: 0},
		{in: "cxi17", want: 17},
		{in: "cxi", wantErr: true},
		{in: "cxi01", wantErr: true},
		{in: "cxi-1", wantErr: true},
		{in: "cxi+1", wantErr: true},
		{in: "hsn0", wantErr: true},
		{in: "cxi99999999999999999999", wantErr: true},
		{in: "cxi0\n", wantErr: true},
	})
}

func TestParseMAC(t *testing.T) {
	runParse(t, "parseMAC", parseMAC, []parseCase[net.HardwareAddr]{
		{in: "02:00:00:00:54:90\n", want: net.HardwareAddr{2, 0, 0, 0, 0x54, 0x90}},
		{in: "02-00-00-00-54-90\n", wantErr: true},
		{in: "0200.0000.5490\n", wantErr: true},
		{in: "00:00:00:00:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n", wantErr: true}, // InfiniBand
		{in: "02:00:00:00:54:9g\n", wantErr: true},
		{in: "", wantErr: true},
	})
}

func TestParseOperState(t *testing.T) {
	runParse(t, "parseOperState", parseOperState, []parseCase[string]{
		{in: "up\n", want: OperStateUp},
		{in: "down\n", want: OperStateDown},
		{in: "lowerlayerdown\n", want: OperStateLowerLayerDown},
		{in: "unknown\n", want: OperStateUnknown},
		{in: "UP\n", wantErr: true},
		{in: "", wantErr: true},
	})
}

func TestParseAddrAssignType(t *testing.T) {
	runParse(t, "parseAddrAssignType", parseAddrAssignType, []parseCase[int]{
		{in: "3\n", want: AddrAssignSet},
		{in: "0\n", want: AddrAssignPermanent},
		{in: "4\n", wantErr: true},
		{in: "-1\n", wantErr: true},
	})
}

func TestIdentify(t *testing.T) {
	cases := []struct {
		vendor, device uint16
		gen            Generation
		vf, ok         bool
	}{
		{0x17db, 0x0501, Cassini1, false, true},
		{0x1590, 0x0371, Cassini2, false, true},
		{0x1590, 0x0372, Cassini2, true, true},
		{0x1590, 0x0501, GenerationUnknown, false, false},
		{0x10de, 0x2330, GenerationUnknown, false, false},
	}
	for _, c := range cases {
		gen, vf, ok := Identify(c.vendor, c.device)
		if gen != c.gen || vf != c.vf || ok != c.ok {
			t.Errorf("Identify(%#04x, %#04x) = %v, %v, %v; want %v, %v, %v",
				c.vendor, c.device, gen, vf, ok, c.gen, c.vf, c.ok)
		}
	}
}

func TestAttrErrorIs(t *testing.T) {
	missing := attrErr("class/cxi/cxi0/device/properties/nid", &pathErr)
	if !errors.Is(missing, ErrMissing) || errors.Is(missing, ErrInvalidValue) {
		t.Errorf("missing file: errors.Is ErrMissing %v, ErrInvalidValue %v; want true, false",
			errors.Is(missing, ErrMissing), errors.Is(missing, ErrInvalidValue))
	}
	if got, want := missing.Error(), "sysfs class/cxi/cxi0/device/properties/nid: file does not exist"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	_, perr := parseHex32("zz")
	bad := &AttrError{Path: "p", Err: perr}
	if errors.Is(bad, ErrMissing) || !errors.Is(bad, ErrInvalidValue) {
		t.Errorf("garbage: errors.Is ErrMissing %v, ErrInvalidValue %v; want false, true",
			errors.Is(bad, ErrMissing), errors.Is(bad, ErrInvalidValue))
	}
	var ae *AttrError
	if !errors.As(bad, &ae) || ae.Path != "p" {
		t.Errorf("errors.As: %v", bad)
	}
}

var pathErr = fs.PathError{Op: "open", Path: "/sys/class/cxi/cxi0/device/properties/nid", Err: fs.ErrNotExist}

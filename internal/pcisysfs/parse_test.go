package pcisysfs

import (
	"errors"
	"reflect"
	"slices"
	"strings"
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

func TestParseHex(t *testing.T) {
	hex32 := func(s string) (uint64, error) { return ParseHex(s, 32) }
	runParse(t, "ParseHex32", hex32, []parseCase[uint64]{
		{in: "0x5490\n", want: 0x5490},
		{in: "0xffffffff\n", want: 0xffffffff}, // CXI_INVALID_NID until set
		{in: "0XABC", want: 0xabc},
		{in: "1f\n", want: 0x1f}, // strtoul(s, NULL, 16) takes no prefix too
		{in: " 0x0 \n", want: 0},
		{in: "0x00000000000000ff\n", want: 0xff}, // padding does not change the value
		{in: "0x100000000\n", wantErr: true},
		{in: "0x\n", wantErr: true},
		{in: "", wantErr: true},
		{in: "\n", wantErr: true},
		{in: "0xg\n", wantErr: true},
		{in: "-0x1\n", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "0x+1", wantErr: true},
		{in: "0x1_0", wantErr: true},
		{in: "0x0x1", wantErr: true},
		{in: "0x1 0x2", wantErr: true},
	})
	for _, bad := range []int{0, -1, 65} {
		if _, err := ParseHex("1", bad); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("ParseHex(\"1\", %d) = %v, want ErrInvalidValue", bad, err)
		}
	}
}

func TestParseID(t *testing.T) {
	runParse(t, "ParseID", ParseID, []parseCase[uint16]{
		{in: "0x1590\n", want: 0x1590},
		{in: "0x10de\n", want: 0x10de},
		{in: "1002", want: 0x1002},
		{in: "0xffff", want: 0xffff},
		{in: "0x010de\n", want: 0x10de}, // cxi/sysfs took it, gpu did not: taken
		{in: "0x10000\n", wantErr: true},
		{in: "garbage\n", wantErr: true},
		{in: "\x01garbage\xff\n", wantErr: true},
	})
}

func TestParseClass(t *testing.T) {
	runParse(t, "ParseClass", ParseClass, []parseCase[uint32]{
		{in: "0x030200\n", want: 0x030200},
		{in: "0x020000\n", want: 0x020000},
		{in: "0x1030200", wantErr: true},
		{in: "0x", wantErr: true},
	})
}

func TestParseNUMANode(t *testing.T) {
	runParse(t, "ParseNUMANode", ParseNUMANode, []parseCase[int]{
		{in: "1\n", want: 1},
		{in: "-1\n", want: -1},
		{in: "0", want: 0},
		{in: "1023\n", want: 1023},
		{in: "01", want: 1}, // gpu refused the padding, cxi/sysfs took it: taken
		{in: "-2\n", wantErr: true},
		{in: "-7\n", wantErr: true},
		{in: "+1", wantErr: true}, // cxi/sysfs took the sign, gpu did not: refused
		{in: "1024", wantErr: true},
		{in: "100000", wantErr: true},
		{in: "node0\n", wantErr: true},
		{in: "", wantErr: true},
	})
}

func TestParseCPUList(t *testing.T) {
	runParse(t, "ParseCPUList", ParseCPUList, []parseCase[[]int]{
		{in: "0-3\n", want: []int{0, 1, 2, 3}},
		{in: "0-1,64-65\n", want: []int{0, 1, 64, 65}},
		{in: "5", want: []int{5}},
		{in: "4,0-1,1-2", want: []int{0, 1, 2, 4}}, // any order, overlaps, as bitmap_parselist
		{in: "\n", want: nil},                      // an empty mask
		{in: "65535", want: []int{65535}},
		{in: "65536", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "0-31:2/4", wantErr: true},
		{in: "0,,1", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "0 1", wantErr: true},
		{in: "0x10", wantErr: true},
	})
	all, err := ParseCPUList("0-65535")
	if err != nil || len(all) != MaxCPUs || all[MaxCPUs-1] != MaxCPUs-1 {
		t.Errorf("ParseCPUList(0-65535): %d CPUs, %v", len(all), err)
	}
}

func TestParseAddress(t *testing.T) {
	runParse(t, "ParseAddress", ParseAddress, []parseCase[string]{
		{in: "0000:21:00.0", want: "0000:21:00.0"},
		{in: "0000:C1:1F.7\n", want: "0000:c1:1f.7"},
		{in: "10000:e1:00.0", want: "10000:e1:00.0"}, // VMD domains have five digits
		{in: "0000:21:20.0", wantErr: true},          // device is 5 bits
		{in: "0000:21:00.8", wantErr: true},          // function is 3 bits
		{in: "000:21:00.0", wantErr: true},
		{in: "0000:121:00.0", wantErr: true},
		{in: "0000:21:00", wantErr: true},
		{in: "virtio0", wantErr: true},
		{in: "..", wantErr: true},
		{in: "", wantErr: true},
		{in: "0000:+1:00.0", wantErr: true},
		{in: "+000:1b:00.0", wantErr: true},
	})
}

func TestParseRootComplex(t *testing.T) {
	runParse(t, "ParseRootComplex", ParseRootComplex, []parseCase[string]{
		{in: "pci0000:A0", want: "pci0000:a0"},
		{in: "pci10000:e0", want: "pci10000:e0"},
		{in: "PCI0000:20", wantErr: true},
		{in: "pci0000:2", wantErr: true},
		{in: "pci0000:20\n", wantErr: true}, // a name, not an attribute
		{in: "0000:20:01.0", wantErr: true},
	})
}

func TestParseDevicePath(t *testing.T) {
	for _, tc := range []struct {
		in      string
		addr    string
		root    string
		bridges []string
		bad     bool
	}{
		{in: "../../../devices/pci0000:20/0000:20:01.1/0000:22:00.0", addr: "0000:22:00.0", root: "pci0000:20",
			bridges: []string{"0000:20:01.1"}},
		{in: "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:03.0/0000:05:00.0", addr: "0000:05:00.0",
			root: "pci0000:00", bridges: []string{"0000:00:01.0", "0000:01:00.0", "0000:02:03.0"}},
		// A device on the root bus itself.
		{in: "/sys/devices/pci0000:00/0000:00:02.0", addr: "0000:00:02.0", root: "pci0000:00"},
		// Intel VMD: a nested host bridge below a root port.
		{in: "../../../devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0", addr: "10000:e1:00.0",
			root: "pci0000:00", bridges: []string{"0000:00:0e.0", "pci10000:e0", "10000:e0:06.0"}},
		{in: "../../../devices/PCI0000:20/0000:20:01.1/0000:22:00.0", bad: true},
		{in: "../../../devices/platform/serial8250", bad: true},
		{in: "../../../devices/pci0000:20", bad: true},
		{in: "../../../devices/pci0000:20/0000:20:01.1/net", bad: true},
		{in: "../../../devices/pci0000:20/0000:20:01.1/pci0001:00", bad: true},
		{in: "devices/pci0000:00/" + strings.Repeat("0000:00:01.0/", MaxTopologyDepth+1), bad: true},
		{in: "", bad: true},
	} {
		addr, topo, err := ParseDevicePath(tc.in)
		if tc.bad {
			if err == nil || !errors.Is(err, ErrInvalidValue) {
				t.Errorf("ParseDevicePath(%q) = %q %v, %v; want ErrInvalidValue", tc.in, addr, topo, err)
			}
			continue
		}
		if err != nil || addr != tc.addr || topo.Root != tc.root || !slices.Equal(topo.Bridges, tc.bridges) {
			t.Errorf("ParseDevicePath(%q) = %q %q %v, %v", tc.in, addr, topo.Root, topo.Bridges, err)
		}
	}
}

func TestTopologyAffinity(t *testing.T) {
	sw := func(bridges ...string) Topology { return Topology{Root: "pci0000:00", Bridges: bridges} }
	for _, tc := range []struct {
		a, b Topology
		want int
	}{
		{sw("0000:00:01.0", "0000:01:00.0", "0000:02:00.0"), sw("0000:00:01.0", "0000:01:00.0", "0000:02:01.0"), 3},
		{sw("0000:00:01.0"), sw("0000:00:01.0"), 2},
		{sw("0000:00:01.0"), sw("0000:00:02.0"), 1},
		{sw(), sw("0000:00:02.0"), 1},
		{sw("0000:00:01.0"), Topology{Root: "pci0000:80", Bridges: []string{"0000:00:01.0"}}, 0},
		{Topology{}, Topology{}, 0},
	} {
		if got, back := tc.a.Affinity(tc.b), tc.b.Affinity(tc.a); got != tc.want || back != got {
			t.Errorf("Affinity(%q, %q) = %d (back %d), want %d", tc.a, tc.b, got, back, tc.want)
		}
	}
}

func TestParseResource(t *testing.T) {
	const zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
	pf := Resource{Start: 0x200000000000, End: 0x20007fffffff, Flags: 0x14220c}
	runParse(t, "ParseResource", ParseResource, []parseCase[[]Resource]{
		{in: "0x0000200000000000 0x000020007fffffff 0x000000000014220c\n" + zero, want: []Resource{pf, {}}},
		{in: "0x0000000000000000 0x0000000000000fff 0x0000000000040200", want: []Resource{{End: 0xfff, Flags: 0x40200}}},
		{in: "0x10 0x10 0x0", want: []Resource{{Start: 0x10, End: 0x10}}},
		{in: "0x10 0x0 0x0", want: []Resource{{Start: 0x10}}}, // end 0: not assigned, whatever the start
		{in: "0x0 0xffffffffffffffff 0x0", wantErr: true},
		{in: "0x20 0x10 0x0", wantErr: true},
		{in: "0x0000200000000000 0x000020007fffffff\n", wantErr: true},
		{in: "200000000000 20007fffffff 14220c\n", wantErr: true},
		{in: "0x0x10 0x20 0x0", wantErr: true},
		{in: "0x10 0xzz 0x0", wantErr: true},
		// cxi/sysfs read only the first line; every line is checked now.
		{in: "0x0 0xfff 0x0\ngarbage\n", wantErr: true},
		{in: zero + "\n", wantErr: true},
		{in: strings.Repeat(zero, maxResources+1), wantErr: true},
		{in: "", wantErr: true},
	})
	for _, tc := range []struct {
		r    Resource
		want uint64
	}{
		{pf, 2 << 30},
		{Resource{Start: 0x201000000000, End: 0x20101fffffff}, 512 << 20},
		{Resource{}, 0},
		{Resource{Start: 0x10}, 0},
		{Resource{End: 0xfff}, 4096},
	} {
		if got := tc.r.Len(); got != tc.want {
			t.Errorf("%+v.Len() = %d, want %d", tc.r, got, tc.want)
		}
	}
}

func TestParseUevent(t *testing.T) {
	runParse(t, "ParseUevent", ParseUevent, []parseCase[map[string]string]{
		{in: "DRIVER=cxi_ss1\nPCI_SLOT_NAME=0000:21:00.0\n",
			want: map[string]string{"DRIVER": "cxi_ss1", "PCI_SLOT_NAME": "0000:21:00.0"}},
		{in: "", want: map[string]string{}},
		{in: "MODALIAS=pci:v00001590d00000371sv00001590sd00000371bc02sc00i00\n\n",
			want: map[string]string{"MODALIAS": "pci:v00001590d00000371sv00001590sd00000371bc02sc00i00"}},
		{in: "A=b=c\n", want: map[string]string{"A": "b=c"}},
		{in: "no equals sign\n", wantErr: true},
		{in: "=value\n", wantErr: true},
		{in: "lower=case\n", wantErr: true},
	})
}

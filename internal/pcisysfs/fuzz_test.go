package pcisysfs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// One fuzz target per parser. Besides "never panics", each checks that a
// refusal wraps ErrInvalidValue and that what it accepts prints back, as
// the kernel prints it, to text it accepts again with the same value.

var garbageSeeds = []string{"", "\n", "\x01garbage\xff\n", "-", "0x", "99999999999999999999", " 7 \n", "+1", "-1",
	"0x5490\n", "1e3"}

func addSeeds(f *testing.F, seeds ...[]string) {
	for _, list := range seeds {
		for _, s := range list {
			f.Add(s)
		}
	}
}

func mustBeInvalid(t *testing.T, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("parse(%q): error %v does not wrap ErrInvalidValue", in, err)
	}
}

func FuzzParseHex(f *testing.F) {
	for _, s := range append(garbageSeeds, "0xffffffff\n", "0X1f", "0x100000000", "0x0x1", "0x00000000000000000001") {
		f.Add(s, uint8(32))
		f.Add(s, uint8(64))
	}
	f.Add("1", uint8(0))
	f.Add("1", uint8(65))
	f.Fuzz(func(t *testing.T, s string, bitSize uint8) {
		v, err := ParseHex(s, int(bitSize))
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if bitSize < 64 && v>>bitSize != 0 {
			t.Fatalf("ParseHex(%q, %d) = %#x, wider than %d bits", s, bitSize, v, bitSize)
		}
		if back, err := ParseHex(fmt.Sprintf("0x%x\n", v), int(bitSize)); err != nil || back != v {
			t.Fatalf("ParseHex(%q, %d) = %#x, round trip %#x %v", s, bitSize, v, back, err)
		}
	})
}

func FuzzParseID(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0x10de\n", "0x1590", "ffff", "0X1a", "0x10000", "0x010de"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseID(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if back, err := ParseID(fmt.Sprintf("0x%04x\n", v)); err != nil || back != v {
			t.Fatalf("ParseID(%q) = %#x, round trip %#x %v", s, v, back, err)
		}
	})
}

func FuzzParseClass(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0x030200\n", "0x038000", "0x060400", "0x1000000", "0x0030200"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseClass(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if v > 0xffffff {
			t.Fatalf("ParseClass(%q) = %#x, wider than 24 bits", s, v)
		}
		if back, err := ParseClass(fmt.Sprintf("0x%06x\n", v)); err != nil || back != v {
			t.Fatalf("ParseClass(%q) = %#x, round trip %#x %v", s, v, back, err)
		}
	})
}

func FuzzParseNUMANode(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0\n", "1", "-2", "63", "01", "-01", "1023", "1024", "65536"})
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseNUMANode(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if v < -1 || v >= MaxNUMANodes {
			t.Fatalf("ParseNUMANode(%q) = %d", s, v)
		}
		if back, err := ParseNUMANode(fmt.Sprintf("%d\n", v)); err != nil || back != v {
			t.Fatalf("ParseNUMANode(%q) = %d, round trip %d %v", s, v, back, err)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0-31\n", "0-31,64-95\n", "5", "4,0-1,1-2", "0-65535", "3-1", "0-31:2/4",
		"0,,1", "63-64", "0-63,128-191"})
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
			t.Fatalf("ParseCPUList(%q) = %v, not ascending and unique", s, cpus)
		}
		if len(cpus) > 0 && (cpus[0] < 0 || cpus[len(cpus)-1] >= MaxCPUs) {
			t.Fatalf("ParseCPUList(%q) = %v, out of range", s, cpus)
		}
		if back, err := ParseCPUList(formatCPUList(cpus) + "\n"); err != nil || !slices.Equal(back, cpus) {
			t.Fatalf("ParseCPUList(%q) = %v, round trip %v %v", s, cpus, back, err)
		}
	})
}

// formatCPUList prints ascending CPUs as the kernel's %*pbl does.
func formatCPUList(cpus []int) string {
	var groups []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			groups = append(groups, strconv.Itoa(cpus[i]))
		} else {
			groups = append(groups, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(groups, ",")
}

func FuzzParseAddress(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0000:17:00.0", "0000:1B:00.0\n", "10000:e1:00.0", "0000:1b:1f.7",
		"0000:1b:20.0", "0:1b:00.0", "0000:+1:00.0", "virtio0", ".."})
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if back, err := ParseAddress(a); err != nil || back != a || a != strings.ToLower(a) {
			t.Fatalf("ParseAddress(%q) = %q, not canonical: %q %v", s, a, back, err)
		}
	})
}

func FuzzParseRootComplex(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"pci0000:20", "pci10000:e0", "PCI0000:20", "pci0000:2", "pci0000:A0"})
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRootComplex(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if back, err := ParseRootComplex(r); err != nil || back != r || r != strings.ToLower(r) {
			t.Fatalf("ParseRootComplex(%q) = %q, not canonical: %q %v", s, r, back, err)
		}
	})
}

func FuzzParseDevicePath(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"../../../devices/pci0000:20/0000:20:01.1/0000:22:00.0",
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:03.0/0000:05:00.0",
		"../../../devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
		"/sys/devices/pci0000:00/0000:00:02.0", "../../../devices/pci0000:20", "../devices/pci0000:20//0000:20:01.1/x",
		strings.Repeat("0000:00:01.0/", 40)})
	f.Fuzz(func(t *testing.T, s string) {
		addr, topo, err := ParseDevicePath(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if a, err := ParseAddress(addr); err != nil || a != addr {
			t.Fatalf("ParseDevicePath(%q): device %q is not a canonical address", s, addr)
		}
		if r, err := ParseRootComplex(topo.Root); err != nil || r != topo.Root {
			t.Fatalf("ParseDevicePath(%q): root %q", s, topo.Root)
		}
		if len(topo.Bridges) >= MaxTopologyDepth {
			t.Fatalf("ParseDevicePath(%q): %d bridges", s, len(topo.Bridges))
		}
		if got := topo.Affinity(topo); got != 1+len(topo.Bridges) {
			t.Fatalf("Affinity with itself %d, want %d", got, 1+len(topo.Bridges))
		}
		// What it accepts, printed as a sysfs path, parses the same.
		a2, t2, err := ParseDevicePath("devices/" + topo.String() + "/" + addr)
		if err != nil || a2 != addr || t2.String() != topo.String() {
			t.Fatalf("ParseDevicePath(%q) = %q %q; reprinted: %q %q %v", s, addr, topo, a2, t2, err)
		}
	})
}

func FuzzParseResource(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"0x0000200000000000 0x000020007fffffff 0x000000000014220c\n",
		"0x0 0x0 0x0\n", "0x20 0x10 0x0", "0x0 0xffffffffffffffff 0x0", "0x1 0x1 0x1 0x1", "1 2 3",
		"0x0 0xfff 0x0\n0x1000 0x1fff 0x200\n", "0x0x1 0x2 0x3"})
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseResource(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if len(rs) == 0 || len(rs) > maxResources {
			t.Fatalf("ParseResource(%q): %d resources", s, len(rs))
		}
		var b strings.Builder
		for _, r := range rs {
			if r.End != 0 && r.Len() == 0 {
				t.Fatalf("ParseResource(%q): %+v has length 0", s, r)
			}
			fmt.Fprintf(&b, "0x%016x 0x%016x 0x%016x\n", r.Start, r.End, r.Flags)
		}
		if back, err := ParseResource(b.String()); err != nil || !slices.Equal(back, rs) {
			t.Fatalf("ParseResource(%q) = %v, round trip %v %v", s, rs, back, err)
		}
	})
}

func FuzzParseUevent(f *testing.F) {
	addSeeds(f, garbageSeeds, []string{"DRIVER=cxi_ss1\nPCI_CLASS=20000\nPCI_ID=1590:0371\nPCI_SLOT_NAME=0000:21:00.0\n",
		"\n\n", "X", "=v", "A=b=c\n", "MAJOR=508\r\nMINOR=0"})
	f.Fuzz(func(t *testing.T, s string) {
		env, err := ParseUevent(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if k == "" || strings.IndexFunc(k, notUeventKeyRune) >= 0 {
				t.Fatalf("ParseUevent(%q): bad key %q", s, k)
			}
			fmt.Fprintf(&b, "%s=%s\n", k, env[k])
		}
		if back, err := ParseUevent(b.String()); err != nil || !maps.Equal(back, env) {
			t.Fatalf("ParseUevent(%q) = %v, round trip %v %v", s, env, back, err)
		}
	})
}

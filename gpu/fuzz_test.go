package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Every parser has a fuzz target. Besides "never panics", each checks that
// rejections wrap ErrInvalidValue and that what it accepts prints back to
// text it accepts again, with the same value.

func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func mustBeInvalid(t *testing.T, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("parse(%q): error %v does not wrap ErrInvalidValue", in, err)
	}
}

var garbageSeeds = []string{"", "\n", "\x01garbage\xff\n", "-", "0x", "99999999999999999999", " 7 \n", "+1"}

func FuzzParseText(f *testing.F) {
	addSeeds(f, garbageSeeds...)
	addSeeds(f, "AMD Instinct MI250X\n", "  NVIDIA H100 80GB HBM3 ", "MI\x07", "\xff", strings.Repeat("x", 300))
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseText(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if v == "" || v != strings.TrimSpace(v) {
			t.Fatalf("parseText(%q) = %q", s, v)
		}
		if back, err := parseText(v + "\n"); err != nil || back != v {
			t.Fatalf("parseText(%q) = %q, round trip %q %v", s, v, back, err)
		}
	})
}

func FuzzParseNVIDIAInfo(f *testing.F) {
	addSeeds(f, garbageSeeds...)
	addSeeds(f, nvidiaInformation, "Model: X\nDevice Minor: 0\n", "Model: X\nDevice Minor: 255\n",
		"Model: X\nDevice Minor: 1\nGPU Excluded: Yes\n", "GPU UUID: GPU-00000000-0000-0000-0000-000000000000\n",
		"Model::\nDevice Minor:: 1\n", "Model: A\nModel: B\nDevice Minor: 2\n")
	f.Fuzz(func(t *testing.T, s string) {
		info, err := parseNVIDIAInfo(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if info.Model == "" || info.Minor < 0 || info.Minor > maxNVIDIAMinor {
			t.Fatalf("parseNVIDIAInfo(%q) = %+v", s, info)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Model: \t\t %s\nDevice Minor: \t %d\n", info.Model, info.Minor)
		if info.UUID != "" {
			fmt.Fprintf(&b, "GPU UUID: \t %s\n", info.UUID)
		}
		if info.BusLocation != "" {
			fmt.Fprintf(&b, "Bus Location: \t %s\n", info.BusLocation)
		}
		if info.Excluded {
			b.WriteString("GPU Excluded:\t Yes\n")
		}
		if back, err := parseNVIDIAInfo(b.String()); err != nil || back != info {
			t.Fatalf("parseNVIDIAInfo(%q) = %+v, round trip %+v %v", s, info, back, err)
		}
	})
}

func FuzzParseAMDUniqueID(f *testing.F) {
	addSeeds(f, garbageSeeds...)
	addSeeds(f, "5a3b2c1d0e9f8a7b\n", "abc", "0000000000000000", "15a3b2c1d0e9f8a7b", "FFFFFFFFFFFFFFFF")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := parseAMDUniqueID(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if len(u) != len("GPU-")+16 || !strings.HasPrefix(u, "GPU-") || u[4:] != strings.ToLower(u[4:]) {
			t.Fatalf("parseAMDUniqueID(%q) = %q", s, u)
		}
		if back, err := parseAMDUniqueID(u[4:]); err != nil || back != u {
			t.Fatalf("parseAMDUniqueID(%q) = %q, round trip %q %v", s, u, back, err)
		}
	})
}

func FuzzParseDRMName(f *testing.F) {
	addSeeds(f, garbageSeeds...)
	addSeeds(f, "renderD128", "card0", "card0-DP-1", "renderD0128", "controlD64", "renderD9999", "card")
	f.Fuzz(func(t *testing.T, s string) {
		kind, n, err := parseDRMName(s)
		if err != nil {
			mustBeInvalid(t, s, err)
			return
		}
		if (kind != drmRender && kind != drmCard) || n < 0 || kind+fmt.Sprint(n) != s {
			t.Fatalf("parseDRMName(%q) = %q %d", s, kind, n)
		}
	})
}

// FuzzCarve builds nodes from bytes, three per GPU (NUMA node, root
// complex and switch, vendor and product) and two per NIC, and checks what
// every carving must satisfy: units never overlap and stay on their NUMA
// node, and each NUMA node gives exactly as many units as its matching
// GPUs and its NICs allow.
func FuzzCarve(f *testing.F) {
	f.Add([]byte{2, 1, 0, 0, 0, 1, 0, 0, 2, 1, 0, 3, 1, 0, 4, 1, 0, 0, 0, 0, 0, 1, 0}, uint8(2), uint8(1), false)
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 5, 5}, uint8(1), uint8(2), true)
	f.Add([]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7}, uint8(3), uint8(0), false)
	f.Fuzz(func(t *testing.T, data []byte, count, per uint8, share bool) {
		nGPU := 0
		if len(data) > 0 {
			nGPU = min(int(data[0])%17, (len(data)-1)/3)
		}
		body := data[min(1, len(data)):]
		var gpus []GPU
		for i := range nGPU {
			b := body[3*i : 3*i+3]
			root := fmt.Sprintf("pci0000:%02x", b[1]%4*0x20)
			sw := fmt.Sprintf("0000:%02x:%02x.0", b[1]%4*0x20, b[1]/4%3+1)
			g := GPU{PCIAddress: fmt.Sprintf("0000:%02x:%02x.0", 0x80+i, b[2]%2), Vendor: NVIDIA,
				NUMANode: int(b[0]%3) - 1, Topology: PCIPath{Root: root, Bridges: []string{sw}},
				Product: "NVIDIA H100 80GB HBM3", DevNodes: []string{fmt.Sprintf("nvidia%d", i)}}
			if b[2]%7 == 3 {
				g.Vendor, g.Product = AMD, "AMD Instinct MI210"
			}
			if b[2]%11 == 5 {
				g.Product = "NVIDIA A100-SXM4-80GB"
			}
			gpus = append(gpus, g)
		}
		rest := body[3*nGPU:]
		var nics []NIC
		for i := 0; i+1 < len(rest) && i < 32; i += 2 {
			b := rest[i : i+2]
			nics = append(nics, NIC{Name: fmt.Sprintf("cxi%d", i/2), PCIAddress: fmt.Sprintf("0001:%02x:00.0", i/2),
				NUMANode: int(b[0]%3) - 1, Topology: PCIPath{Root: fmt.Sprintf("pci0000:%02x", b[1]%4*0x20),
					Bridges: []string{fmt.Sprintf("0000:%02x:%02x.0", b[1]%4*0x20, b[1]/4%3+1)}}})
		}
		mt := machineType("nvidia", int(count%5), int(per%4))
		mt.GPU.Family = "H100"
		c, err := Carve(gpus, nics, mt, CarveOptions{ShareNICs: share})
		if mt.GPU.Count == 0 {
			if !errors.Is(err, ErrInvalidMachineType) {
				t.Fatalf("count 0: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkUnits(t, c, gpus, nics, share)
		matching, nicsOn, unitsOn := map[int]int{}, map[int]int{}, map[int]int{}
		for _, g := range gpus {
			if g.Vendor == NVIDIA && strings.Contains(g.Product, "H100") {
				matching[g.NUMANode]++
			}
		}
		for _, n := range nics {
			nicsOn[n.NUMANode]++
		}
		for _, u := range c.Units {
			unitsOn[u.NUMANode]++
		}
		for numa := -1; numa <= 1; numa++ {
			want := matching[numa] / mt.GPU.Count
			switch p := mt.NICsPerUnit; {
			case p == 0:
			case share && nicsOn[numa] < p:
				want = 0
			case !share:
				want = min(want, nicsOn[numa]/p)
			}
			if unitsOn[numa] != want {
				t.Fatalf("NUMA node %d: %d units, want %d (%d matching GPUs, %d NICs, %d+%d per unit, share %v)",
					numa, unitsOn[numa], want, matching[numa], nicsOn[numa], mt.GPU.Count, mt.NICsPerUnit, share)
			}
		}
	})
}

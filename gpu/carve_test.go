package gpu

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

func machineType(vendor string, count, nics int) MachineType {
	return MachineType{Name: "compute-xlarge", GPU: GPUSpec{Type: vendor, Count: count}, NICsPerUnit: nics}
}

// checkUnits checks what must hold of every carving: units do not overlap,
// each unit's GPUs and NICs are on its NUMA node, IDs are unique and short,
// and every GPU is in a unit or excluded, once.
func checkUnits(t *testing.T, c *Carving, gpus []GPU, nics []NIC, share bool) {
	t.Helper()
	seenGPU := map[string]string{}
	nicOwners := map[string]int{}
	ids := map[string]bool{}
	for _, u := range c.Units {
		if len(u.ID) == 0 || len(u.ID) > 63 || ids[u.ID] {
			t.Errorf("unit ID %q empty, too long or repeated", u.ID)
		}
		ids[u.ID] = true
		if got, ok := c.Unit(u.ID); !ok || got.ID != u.ID {
			t.Errorf("Unit(%q) does not find it", u.ID)
		}
		if len(u.GPUs) != c.MachineType.GPU.Count || len(u.NICs) != c.MachineType.NICsPerUnit {
			t.Errorf("unit %s has %d GPUs and %d NICs, want %d and %d", u.ID, len(u.GPUs), len(u.NICs),
				c.MachineType.GPU.Count, c.MachineType.NICsPerUnit)
		}
		for _, g := range u.GPUs {
			if prev, dup := seenGPU[g.PCIAddress]; dup {
				t.Errorf("GPU %s in units %s and %s", g.PCIAddress, prev, u.ID)
			}
			seenGPU[g.PCIAddress] = u.ID
			if g.NUMANode != u.NUMANode {
				t.Errorf("unit %s on NUMA node %d holds GPU %s of node %d", u.ID, u.NUMANode, g.PCIAddress, g.NUMANode)
			}
		}
		for _, n := range u.NICs {
			nicOwners[n.Name]++
			if n.NUMANode != u.NUMANode {
				t.Errorf("unit %s on NUMA node %d holds NIC %s of node %d", u.ID, u.NUMANode, n.Name, n.NUMANode)
			}
		}
	}
	for name, owners := range nicOwners {
		if owners > 1 && !share {
			t.Errorf("NIC %s in %d units without sharing", name, owners)
		}
		if slices.ContainsFunc(c.FreeNICs, func(n NIC) bool { return n.Name == name }) {
			t.Errorf("NIC %s both in a unit and free", name)
		}
	}
	if len(nicOwners)+len(c.FreeNICs) != len(nics) {
		t.Errorf("%d NICs in units and %d free, of %d", len(nicOwners), len(c.FreeNICs), len(nics))
	}
	for _, e := range c.Excluded {
		if _, dup := seenGPU[e.PCIAddress]; dup {
			t.Errorf("GPU %s both in a unit and excluded (%s)", e.PCIAddress, e.Reason)
		}
		seenGPU[e.PCIAddress] = "excluded"
		if !strings.HasPrefix(e.Reason, "GPU "+e.PCIAddress+" ") {
			t.Errorf("reason %q does not start by naming the GPU", e.Reason)
		}
	}
	if len(seenGPU) != len(gpus) {
		t.Errorf("%d GPUs accounted for, of %d", len(seenGPU), len(gpus))
	}
}

// The case: 8 GPUs on 2 NUMA nodes, 4 NICs, 2 GPUs per unit and one
// NIC each give 4 units, each on one NUMA node with a NIC of that node.
func TestCarveEightGPUsTwoNUMANodesFourNICs(t *testing.T) {
	for _, vendor := range []string{mocksysfs.NVIDIA, mocksysfs.AMD} {
		t.Run(vendor, func(t *testing.T) {
			truth := writeMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, GPUVendor: vendor})
			d, nics := discoverNode(t, truth)
			c, err := Carve(d.GPUs, nics, machineType(vendor, 2, 1), CarveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkUnits(t, c, d.GPUs, nics, false)
			if len(c.Units) != 4 || len(c.Excluded) != 0 || len(c.FreeNICs) != 0 {
				t.Fatalf("%d units, excluded %v, free NICs %v; want 4, none, none", len(c.Units), c.Excluded, c.FreeNICs)
			}
			perNUMA := map[int]int{}
			for _, u := range c.Units {
				perNUMA[u.NUMANode]++
				if !u.Healthy || u.Reason != "" {
					t.Errorf("unit %s unhealthy in ready mode: %s", u.ID, u.Reason)
				}
				if slices.Equal(u.NUMANodes(), []int64{int64(u.NUMANode)}) == false {
					t.Errorf("unit %s NUMANodes %v", u.ID, u.NUMANodes())
				}
			}
			if perNUMA[0] != 2 || perNUMA[1] != 2 {
				t.Errorf("units per NUMA node %v, want 2 and 2", perNUMA)
			}
			// The generator puts the first GPU and NIC of a node on one
			// root complex: the first unit gets that NIC.
			u := c.Units[0]
			if u.GPUs[0].PCIAddress != truth.GPUs[0].BDF || u.NICs[0].Name != truth.GPUs[0].NearestNIC {
				t.Errorf("first unit %v with NIC %v, want GPU %s with its nearest NIC %s",
					u.GPUs[0].PCIAddress, u.NICNames(), truth.GPUs[0].BDF, truth.GPUs[0].NearestNIC)
			}
		})
	}
}

func TestCarveExcludesMismatchingGPUs(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, GPUModels: []string{"h100", "a100"}})
	d, nics := discoverNode(t, truth)
	h100s := func(g mocksysfs.GPU) bool { return g.Model == "h100" }
	a100s := func(g mocksysfs.GPU) bool { return g.Model == "a100" }
	for _, tc := range []struct {
		name    string
		spec    GPUSpec
		carved  func(mocksysfs.GPU) bool
		kind    ExclusionKind
		because string // the reason of the first excluded GPU, %s its address
	}{
		{"family H100", GPUSpec{Type: "nvidia", Count: 2, Family: "H100"}, h100s, ExcludedProduct,
			"GPU %s is 'NVIDIA A100-SXM4-80GB', machine type compute-xlarge wants family H100"},
		{"family in lower case", GPUSpec{Type: "nvidia", Count: 2, Family: "a100"}, a100s, ExcludedProduct,
			"GPU %s is 'NVIDIA H100 80GB HBM3', machine type compute-xlarge wants family a100"},
		{"exact product", GPUSpec{Type: "nvidia", Count: 2, Product: "NVIDIA H100 80GB HBM3"}, h100s, ExcludedProduct,
			"GPU %s is 'NVIDIA A100-SXM4-80GB', machine type compute-xlarge wants product 'NVIDIA H100 80GB HBM3'"},
		{"product as a node label", GPUSpec{Type: "nvidia", Count: 2, Product: "NVIDIA-A100-SXM4-80GB"}, a100s, ExcludedProduct,
			"GPU %s is 'NVIDIA H100 80GB HBM3', machine type compute-xlarge wants product 'NVIDIA-A100-SXM4-80GB'"},
		{"another vendor", GPUSpec{Type: "amd", Count: 1}, func(mocksysfs.GPU) bool { return false }, ExcludedVendor,
			"GPU %s is nvidia 'NVIDIA H100 80GB HBM3', machine type compute-xlarge wants amd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := MachineType{Name: "compute-xlarge", GPU: tc.spec, NICsPerUnit: 1}
			c, err := Carve(d.GPUs, nics, mt, CarveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkUnits(t, c, d.GPUs, nics, false)
			var carved []string
			for _, u := range c.Units {
				for _, g := range u.GPUs {
					carved = append(carved, g.PCIAddress)
				}
			}
			slices.Sort(carved)
			var want []string
			for _, g := range truth.GPUs {
				if tc.carved(g) {
					want = append(want, g.BDF)
				}
			}
			if !slices.Equal(carved, want) {
				t.Errorf("carved %v, want %v", carved, want)
			}
			if len(c.Excluded) != len(truth.GPUs)-len(want) {
				t.Fatalf("excluded %v", c.Excluded)
			}
			first := c.Excluded[0]
			if first.Kind != tc.kind || first.Reason != strings.ReplaceAll(tc.because, "%s", first.PCIAddress) {
				t.Errorf("excluded %s (%v): %q", first.PCIAddress, first.Kind, first.Reason)
			}
		})
	}
}

// A GPU with problems is left out with them; its siblings are carved.
func TestCarveHealthySiblingsOfABrokenGPU(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, GPUVendor: mocksysfs.AMD})
	broken := truth.GPUs[1].BDF
	if err := os.WriteFile(filepath.Join(gpuDir(t, truth, broken), "numa_node"), []byte("zero\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, nics := discoverNode(t, truth)
	c, err := Carve(d.GPUs, nics, machineType("amd", 2, 1), CarveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkUnits(t, c, d.GPUs, nics, false)
	if len(c.Units) != 3 {
		t.Errorf("%d units, want 3 (one on the broken GPU's node, two on the other)", len(c.Units))
	}
	kinds := map[ExclusionKind][]string{}
	for _, e := range c.Excluded {
		kinds[e.Kind] = append(kinds[e.Kind], e.PCIAddress)
		if e.Kind == ExcludedUnhealthy && !strings.Contains(e.Reason, "bus/pci/devices/"+broken+"/numa_node") {
			t.Errorf("reason %q does not name the file", e.Reason)
		}
	}
	if !slices.Equal(kinds[ExcludedUnhealthy], []string{broken}) || len(kinds[ExcludedLeftover]) != 1 {
		t.Errorf("excluded %v, want %s unhealthy and one leftover", c.Excluded, broken)
	}
}

// Hand-built PCIe switches: carving packs GPUs below one switch together
// before it pairs across switches, and gives each unit its switch's NIC.
func TestCarvePrefersGPUsAndNICsBelowOneSwitch(t *testing.T) {
	for _, tc := range []struct {
		name             string
		gpus, nics       []int // per switch, one root complex
		count, per       int
		want             [][]int // GPU ordinals of each unit, in unit order
		wantNICs         [][]string
		wantLocality     []Locality
		excluded         int
		secondRootOnNUMA bool
	}{
		{
			name: "a full switch between two lone GPUs", gpus: []int{1, 2, 1}, nics: []int{0, 1, 1}, count: 2, per: 1,
			// PCI order would pair 0+1 and 2+3, both across switches.
			want: [][]int{{1, 2}, {0, 3}}, wantNICs: [][]string{{"cxi0"}, {"cxi1"}},
			wantLocality: []Locality{LocalitySwitch, LocalityRootComplex},
		},
		{
			name: "no unit takes another's switch NIC", gpus: []int{2, 2, 2, 0}, nics: []int{1, 1, 1, 1}, count: 2, per: 2,
			// Each switch's unit gets its own NIC first; the fourth NIC
			// completes the first unit, and the last unit, short of a
			// NIC, gives its own to the second.
			want:     [][]int{{0, 1}, {2, 3}},
			wantNICs: [][]string{{"cxi0", "cxi3"}, {"cxi1", "cxi2"}}, wantLocality: []Locality{LocalitySwitch, LocalitySwitch},
			excluded: 2,
		},
		{
			name: "four per unit across switches", gpus: []int{2, 2, 2, 2}, nics: []int{1, 0, 0, 1}, count: 4, per: 1,
			want: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}, wantNICs: [][]string{{"cxi0"}, {"cxi1"}},
			wantLocality: []Locality{LocalityRootComplex, LocalityRootComplex},
		},
		{
			name: "two root complexes on one NUMA node", gpus: []int{1}, nics: []int{0}, count: 2, per: 1,
			secondRootOnNUMA: true,
			want:             [][]int{{0, 1}}, wantNICs: [][]string{{"cxi0"}}, wantLocality: []Locality{LocalityNUMA},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var minor, nic int
			devs := switchTopo(0x00, 0, "nvidia", "NVIDIA H100 80GB HBM3", tc.gpus, tc.nics, &minor, &nic)
			if tc.secondRootOnNUMA {
				devs = append(devs, switchTopo(0x80, 0, "nvidia", "NVIDIA H100 80GB HBM3", []int{1}, []int{1}, &minor, &nic)...)
			}
			sys, proc, cxiNICs := fakeNode(t, devs)
			d, err := Discover(os.DirFS(sys), os.DirFS(proc))
			if err != nil || d.Err() != nil {
				t.Fatalf("Discover: %v, %v", err, d.Err())
			}
			nics, errs := NICsFromCXI(os.DirFS(sys), cxiNICs)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			c, err := Carve(d.GPUs, nics, machineType("nvidia", tc.count, tc.per), CarveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkUnits(t, c, d.GPUs, nics, false)
			if len(c.Units) != len(tc.want) || len(c.Excluded) != tc.excluded {
				t.Fatalf("%d units, excluded %v; want %d units, %d excluded", len(c.Units), c.Excluded, len(tc.want), tc.excluded)
			}
			for i, u := range c.Units {
				var got []int
				for _, g := range u.GPUs {
					got = append(got, slices.IndexFunc(d.GPUs, func(x GPU) bool { return x.PCIAddress == g.PCIAddress }))
				}
				if !slices.Equal(got, tc.want[i]) || !slices.Equal(u.NICNames(), tc.wantNICs[i]) || u.Locality != tc.wantLocality[i] {
					t.Errorf("unit %d: GPUs %v NICs %v %v, want %v %v %v", i, got, u.NICNames(), u.Locality,
						tc.want[i], tc.wantNICs[i], tc.wantLocality[i])
				}
			}
		})
	}
}

func TestCarveWhenNICsRunShort(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 8})
	d, nics := discoverNode(t, truth)
	for _, tc := range []struct {
		name           string
		per            int
		share          bool
		units, dropped int
		shared         bool
	}{
		{"exclusive: one unit per NIC", 1, false, 2, 4, false},
		{"shared: units share their node's NIC", 1, true, 4, 0, true},
		{"shared but a node has fewer NICs than a unit takes", 2, true, 0, 8, false},
		{"exclusive, two per unit", 2, false, 0, 8, false},
		{"no NICs wanted", 0, false, 4, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Carve(d.GPUs, nics, machineType("nvidia", 2, tc.per), CarveOptions{ShareNICs: tc.share})
			if err != nil {
				t.Fatal(err)
			}
			checkUnits(t, c, d.GPUs, nics, tc.share)
			if len(c.Units) != tc.units || len(c.Excluded) != tc.dropped {
				t.Fatalf("%d units and %d excluded, want %d and %d: %v", len(c.Units), len(c.Excluded), tc.units, tc.dropped, c.Excluded)
			}
			for _, e := range c.Excluded {
				if e.Kind != ExcludedNoNIC || !strings.Contains(e.Reason, "too few") {
					t.Errorf("excluded %v: %q", e.Kind, e.Reason)
				}
			}
			for _, u := range c.Units {
				if got := len(u.SharedNICs) > 0; got != tc.shared {
					t.Errorf("unit %s shared NICs %v", u.ID, u.SharedNICs)
				}
			}
			if tc.per == 0 && len(c.FreeNICs) != len(nics) {
				t.Errorf("free NICs %v, want all", c.FreeNICs)
			}
		})
	}
}

// A node without NUMA information (every numa_node -1) still carves.
func TestCarveWithoutNUMA(t *testing.T) {
	var gpus []GPU
	var nics []NIC
	for i := range 4 {
		gpus = append(gpus, GPU{PCIAddress: "0000:0" + string(rune('1'+i)) + ":00.0", Vendor: NVIDIA, NUMANode: -1,
			DevNodes: []string{"nvidia" + string(rune('0'+i))}})
	}
	nics = append(nics, NIC{Name: "cxi0", PCIAddress: "0000:10:00.0", NUMANode: -1}, NIC{Name: "cxi1", PCIAddress: "0000:11:00.0", NUMANode: -1})
	c, err := Carve(gpus, nics, machineType("nvidia", 2, 1), CarveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkUnits(t, c, gpus, nics, false)
	if len(c.Units) != 2 || c.Units[0].NUMANode != -1 || c.Units[0].NUMANodes() != nil {
		t.Errorf("units %+v", c.Units)
	}
}

// Unit IDs come from the hardware: the same node gives the same IDs in any
// input order and after a rewrite; another grouping gives other IDs.
func TestUnitIDsAreStable(t *testing.T) {
	spec := mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 8, Seed: 5}
	d1, nics1 := discoverNode(t, writeMock(t, spec))
	d2, nics2 := discoverNode(t, writeMock(t, spec))
	mt := machineType("nvidia", 2, 1)
	ids := func(gpus []GPU, nics []NIC, mt MachineType) []string {
		c, err := Carve(gpus, nics, mt, CarveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, u := range c.Units {
			out = append(out, u.ID)
		}
		return out
	}
	first := ids(d1.GPUs, nics1, mt)
	if again := ids(d2.GPUs, nics2, mt); !slices.Equal(first, again) {
		t.Errorf("rediscovered node: IDs %v, first %v", again, first)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		g, n := slices.Clone(d1.GPUs), slices.Clone(nics1)
		rng.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		rng.Shuffle(len(n), func(i, j int) { n[i], n[j] = n[j], n[i] })
		if got := ids(g, n, mt); !slices.Equal(got, first) {
			t.Errorf("shuffled input: IDs %v, want %v", got, first)
		}
	}
	if !strings.HasPrefix(first[0], d1.GPUs[0].PCIAddress+"-x2-") {
		t.Errorf("ID %q does not start with the first GPU's address", first[0])
	}
	seen := map[string]bool{}
	for _, id := range first {
		seen[id] = true
	}
	for _, other := range []MachineType{machineType("nvidia", 2, 0), machineType("nvidia", 4, 1), machineType("nvidia", 1, 1)} {
		for _, id := range ids(d1.GPUs, nics1, other) {
			if seen[id] {
				t.Errorf("machine type %+v reuses ID %s for another grouping", other, id)
			}
		}
	}
}

func TestCarveRejectsBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		mt   MachineType
		mode string
		want error
	}{
		"no name":          {MachineType{GPU: GPUSpec{Type: "nvidia", Count: 1}}, "", ErrInvalidMachineType},
		"intel":            {MachineType{Name: "x", GPU: GPUSpec{Type: "intel", Count: 1}}, "", ErrInvalidMachineType},
		"zero count":       {machineType("nvidia", 0, 1), "", ErrInvalidMachineType},
		"negative NICs":    {machineType("amd", 1, -1), "", ErrInvalidMachineType},
		"product & family": {MachineType{Name: "x", GPU: GPUSpec{Type: "amd", Count: 1, Product: "a", Family: "b"}}, "", ErrInvalidMachineType},
		"bad mode":         {machineType("nvidia", 1, 1), "drained", ErrInvalidMode},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Carve(nil, nil, tc.mt, CarveOptions{Mode: tc.mode}); !errors.Is(err, tc.want) {
				t.Errorf("Carve = %v, want %v", err, tc.want)
			}
		})
	}
}

// An NVIDIA GPU whose information file is gone has no product; it is
// reported with the missing file, not as a product mismatch.
func TestCarveNamesTheMissingProductFile(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 4})
	broken := truth.GPUs[3].BDF
	info := "driver/nvidia/gpus/" + broken + "/information"
	if err := os.Remove(filepath.Join(truth.ProcRoot, info)); err != nil {
		t.Fatal(err)
	}
	d, nics := discoverNode(t, truth)
	mt := machineType("nvidia", 1, 1)
	mt.GPU.Family = "H100"
	c, err := Carve(d.GPUs, nics, mt, CarveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkUnits(t, c, d.GPUs, nics, false)
	if len(c.Units) != 2 || len(c.Excluded) != 2 {
		t.Fatalf("units %d, excluded %v", len(c.Units), c.Excluded)
	}
	var e Excluded
	for _, x := range c.Excluded {
		if x.PCIAddress == broken {
			e = x
		}
	}
	if e.Kind != ExcludedUnhealthy || !strings.Contains(e.Reason, "procfs "+info) {
		t.Errorf("broken GPU excluded as %v: %q", e.Kind, e.Reason)
	}
}

package gpu

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// checkAgainstTruth compares discovered GPUs with what the generator wrote.
// Without readable links the driver is unknown, so it is compared only with
// links.
func checkAgainstTruth(t *testing.T, d *Discovery, truth *mocksysfs.Truth, links bool) {
	t.Helper()
	if len(d.GPUs) != len(truth.GPUs) {
		t.Fatalf("discovered %d GPUs, generator wrote %d", len(d.GPUs), len(truth.GPUs))
	}
	index := map[Vendor]int{}
	for i, want := range truth.GPUs {
		g := d.GPUs[i]
		if !links {
			g.Driver = want.Driver
		}
		if !g.Healthy() {
			t.Errorf("GPU %s problems: %v", g.PCIAddress, g.Problems)
		}
		if g.PCIAddress != want.BDF || string(g.Vendor) != want.Vendor || g.VendorID != want.VendorID ||
			g.DeviceID != want.DeviceID || g.Class != want.Class || g.NUMANode != want.NUMANode ||
			g.Product != want.ProductName || g.Driver != want.Driver {
			t.Errorf("GPU %d = %+v\nwant %+v", i, g, want)
		}
		if g.Topology.Root != want.RootComplex || len(g.Topology.Bridges) != 1 {
			t.Errorf("GPU %s topology %q, want below %s through one bridge", g.PCIAddress, g.Topology, want.RootComplex)
		}
		if g.Index != index[g.Vendor] {
			t.Errorf("GPU %s index %d, want %d", g.PCIAddress, g.Index, index[g.Vendor])
		}
		index[g.Vendor]++
		if want.Vendor == mocksysfs.NVIDIA && g.UUID != want.UUID {
			t.Errorf("GPU %s UUID %q, want %q", g.PCIAddress, g.UUID, want.UUID)
		}
		if !slices.Equal(g.DevNodes, want.DevNodes) {
			t.Errorf("GPU %s device nodes %v, want %v", g.PCIAddress, g.DevNodes, want.DevNodes)
		}
		if !slices.Equal(g.SharedDevNodes, want.SharedDevNodes) {
			t.Errorf("GPU %s shared nodes %v, want %v", g.PCIAddress, g.SharedDevNodes, want.SharedDevNodes)
		}
		for _, n := range append(slices.Clone(g.DevNodes), g.SharedDevNodes...) {
			if _, err := os.Stat(filepath.Join(truth.DevRoot, n)); err != nil {
				t.Errorf("GPU %s node %s not in the dev tree: %v", g.PCIAddress, n, err)
			}
		}
	}
	if len(d.Problems) > 0 {
		t.Errorf("discovery problems: %v", d.Problems)
	}
}

func TestDiscoverMockNodes(t *testing.T) {
	for name, spec := range map[string]mocksysfs.Spec{
		"nvidia h100":     {NICs: 4, NUMANodes: 2, GPUs: 8, GPUModels: []string{"h100"}},
		"amd mi250x":      {NICs: 4, NUMANodes: 2, GPUs: 8, GPUVendor: mocksysfs.AMD},
		"mixed vendors":   {NICs: 2, NUMANodes: 2, GPUs: 6, GPUModels: []string{"h100", "mi210", "a100"}},
		"no gpus":         {NICs: 2},
		"one numa, a100s": {NICs: 1, GPUs: 3, GPUModels: []string{"a100"}, VFsPerNIC: 1},
	} {
		t.Run(name, func(t *testing.T) {
			truth := writeMock(t, spec)
			d, err := Discover(os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot))
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstTruth(t, d, truth, true)
		})
	}
}

// The same GPUs come out when links cannot be read (the topology is then
// the directory path below devices/) and when bus/pci/devices is missing
// (the functions are then found below devices/).
func TestDiscoverWithoutLinksOrBusDirectory(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 4, GPUModels: []string{"h100", "mi250x"}})
	sys, proc := os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot)
	want, err := Discover(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		fsys  fs.FS
		links bool
	}{
		"no readlink":         {mocksysfs.NoLinkFS{FS: sys}, false},
		"no bus/pci/devices":  {mocksysfs.HideFS{FS: sys, Hidden: []string{"bus/pci/devices"}}, true},
		"neither, via walk":   {mocksysfs.NoLinkFS{FS: mocksysfs.HideFS{FS: sys, Hidden: []string{"bus/pci/devices"}}}, false},
		"no class/drm either": {mocksysfs.HideFS{FS: sys, Hidden: []string{"bus/pci/devices", "class"}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Discover(tc.fsys, proc)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstTruth(t, got, truth, tc.links)
			for i := range got.GPUs {
				if got.GPUs[i].Topology.String() != want.GPUs[i].Topology.String() {
					t.Errorf("GPU %s topology %q, with links %q", got.GPUs[i].PCIAddress,
						got.GPUs[i].Topology, want.GPUs[i].Topology)
				}
			}
		})
	}
}

func TestDiscoverNilAndUnreadable(t *testing.T) {
	if _, err := Discover(nil, nil); err == nil {
		t.Error("Discover(nil) succeeded")
	}
	empty := t.TempDir()
	if _, err := Discover(os.DirFS(empty), nil); !errors.Is(err, ErrMissing) {
		t.Errorf("Discover(empty dir) = %v, want ErrMissing (neither bus/pci/devices nor devices/)", err)
	}
}

// Faults on one GPU give typed errors naming the file, and leave the other
// GPUs healthy and carvable.
func TestDiscoverFaultsKeepSiblingsHealthy(t *testing.T) {
	type fault struct {
		name   string
		spec   mocksysfs.Spec
		victim int // index into truth.GPUs
		// apply breaks the tree and returns the path the error must name,
		// relative to its file system.
		apply    func(t *testing.T, truth *mocksysfs.Truth, bdf string) string
		fsName   string
		sentinel error
	}
	nv := mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 4, GPUModels: []string{"h100"}}
	amd := mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 4, GPUVendor: mocksysfs.AMD}
	overwrite := func(file, content string) func(*testing.T, *mocksysfs.Truth, string) string {
		return func(t *testing.T, truth *mocksysfs.Truth, bdf string) string {
			if err := os.WriteFile(filepath.Join(gpuDir(t, truth, bdf), file), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			return "bus/pci/devices/" + bdf + "/" + file
		}
	}
	remove := func(file string) func(*testing.T, *mocksysfs.Truth, string) string {
		return func(t *testing.T, truth *mocksysfs.Truth, bdf string) string {
			if err := os.RemoveAll(filepath.Join(gpuDir(t, truth, bdf), file)); err != nil {
				t.Fatal(err)
			}
			return "bus/pci/devices/" + bdf + "/" + file
		}
	}
	procInfo := func(content string) func(*testing.T, *mocksysfs.Truth, string) string {
		return func(t *testing.T, truth *mocksysfs.Truth, bdf string) string {
			p := "driver/nvidia/gpus/" + bdf + "/information"
			full := filepath.Join(truth.ProcRoot, p)
			if content == "" {
				if err := os.Remove(full); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	for _, f := range []fault{
		{"nvidia garbage numa_node", nv, 1, overwrite("numa_node", mocksysfs.DefaultGarbage), fsSys, ErrInvalidValue},
		{"amd garbage numa_node", amd, 3, overwrite("numa_node", "-7\n"), fsSys, ErrInvalidValue},
		{"nvidia missing product (no information file)", nv, 2, procInfo(""), fsProc, ErrMissing},
		{"nvidia information without Model", nv, 0, procInfo("Device Minor: \t 3\n"), fsProc, ErrInvalidValue},
		{"nvidia excluded by the driver", nv, 0, procInfo("Model: \t NVIDIA H100 80GB HBM3\nDevice Minor: \t 0\nGPU Excluded:\t Yes\n"), fsProc, ErrInvalidValue},
		{"nvidia bus location of another GPU", nv, 3, procInfo("Model: \t NVIDIA H100 80GB HBM3\nDevice Minor: \t 3\nBus Location: \t 0000:ff:00.0\n"), fsProc, ErrInvalidValue},
		{"amd missing product_name", amd, 2, remove("product_name"), fsSys, ErrMissing},
		{"amd empty product_name", amd, 0, overwrite("product_name", "\n"), fsSys, ErrInvalidValue},
		{"amd without drm", amd, 1, remove("drm"), fsSys, ErrMissing},
		{"garbage device id", nv, 2, overwrite("device", "0xzz\n"), fsSys, ErrInvalidValue},
	} {
		t.Run(f.name, func(t *testing.T) {
			truth := writeMock(t, f.spec)
			bdf := truth.GPUs[f.victim].BDF
			wantPath := f.apply(t, truth, bdf)
			d, _ := discoverNode(t, truth)
			if len(d.GPUs) != len(truth.GPUs) {
				t.Fatalf("%d GPUs, want all %d (broken ones included)", len(d.GPUs), len(truth.GPUs))
			}
			for i, g := range d.GPUs {
				if i != f.victim {
					if !g.Healthy() {
						t.Errorf("sibling %s unhealthy: %v", g.PCIAddress, g.Problems)
					}
					continue
				}
				if len(g.Problems) != 1 {
					t.Fatalf("victim %s problems %v, want one", g.PCIAddress, g.Problems)
				}
				var ae *AttrError
				if !errors.As(g.Problems[0], &ae) {
					t.Fatalf("problem %v is %T, want *AttrError", g.Problems[0], g.Problems[0])
				}
				if ae.FS != f.fsName || ae.Path != wantPath {
					t.Errorf("problem names %s %s, want %s %s", ae.FS, ae.Path, f.fsName, wantPath)
				}
				if !errors.Is(ae, f.sentinel) {
					t.Errorf("problem %v does not match %v", ae, f.sentinel)
				}
				if !strings.Contains(ae.Error(), wantPath) {
					t.Errorf("message %q does not name %s", ae.Error(), wantPath)
				}
			}
			if err := d.Err(); err == nil {
				t.Error("Discovery.Err() is nil with a broken GPU")
			}
		})
	}
}

// A class or vendor file that cannot be read makes a discovery problem: the
// function may be a GPU, but nothing says which vendor's.
func TestDiscoverUnreadableClassIsADiscoveryProblem(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{NICs: 2, GPUs: 2})
	bdf := truth.GPUs[1].BDF
	if err := os.WriteFile(filepath.Join(gpuDir(t, truth, bdf), "class"), []byte("display\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Discover(os.DirFS(truth.SysRoot), os.DirFS(truth.ProcRoot))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.GPUs) != 1 || d.GPUs[0].PCIAddress != truth.GPUs[0].BDF || !d.GPUs[0].Healthy() {
		t.Errorf("GPUs %+v, want only the healthy %s", d.GPUs, truth.GPUs[0].BDF)
	}
	var ae *AttrError
	if len(d.Problems) != 1 || !errors.As(d.Problems[0], &ae) || ae.Path != "bus/pci/devices/"+bdf+"/class" {
		t.Errorf("problems %v, want one naming %s's class", d.Problems, bdf)
	}
}

func TestDiscoverWithoutProcfs(t *testing.T) {
	truth := writeMock(t, mocksysfs.Spec{GPUs: 2, GPUModels: []string{"h100", "mi210"}})
	d, err := Discover(os.DirFS(truth.SysRoot), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range d.GPUs {
		switch g.Vendor {
		case NVIDIA:
			if g.Healthy() || !errors.Is(g.Problems[0], ErrMissing) {
				t.Errorf("NVIDIA GPU without procfs: problems %v, want ErrMissing", g.Problems)
			}
		case AMD:
			if !g.Healthy() {
				t.Errorf("AMD GPU needs no procfs: %v", g.Problems)
			}
		}
	}
}

// PCIe switches: the topology carries every bridge, and AMD's UUID comes
// from unique_id.
func TestDiscoverSwitchTopology(t *testing.T) {
	var minor, nic int
	devs := switchTopo(0x00, 0, "amd", "AMD Instinct MI250X", []int{2, 1}, []int{1, 0}, &minor, &nic)
	sys, proc, _ := fakeNode(t, devs)
	d, err := Discover(os.DirFS(sys), os.DirFS(proc))
	if err != nil {
		t.Fatal(err)
	}
	if d.Err() != nil || len(d.GPUs) != 3 {
		t.Fatalf("GPUs %+v, err %v", d.GPUs, d.Err())
	}
	g0, g1, g2 := d.GPUs[0], d.GPUs[1], d.GPUs[2]
	if got := g0.Topology.String(); got != "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0" {
		t.Errorf("topology %q", got)
	}
	if a := g0.Topology.Affinity(g1.Topology); a != 3 {
		t.Errorf("two GPUs of one switch: affinity %d, want 3 (root, root port, upstream port)", a)
	}
	if a := g0.Topology.Affinity(g2.Topology); a != 1 {
		t.Errorf("GPUs of two switches: affinity %d, want 1 (root complex only)", a)
	}
	if g0.UUID != "GPU-000000000000abc0" || !slices.Equal(g0.DevNodes, []string{"dri/renderD128"}) {
		t.Errorf("GPU 0: UUID %q nodes %v", g0.UUID, g0.DevNodes)
	}
}

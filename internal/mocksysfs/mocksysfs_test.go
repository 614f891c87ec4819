package mocksysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, spec Spec) *Truth {
	t.Helper()
	truth, err := Write(filepath.Join(t.TempDir(), "node"), spec)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return truth
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteRejectsBadSpecs(t *testing.T) {
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{NICs: -1}, "nics must be 0 to 64"},
		{Spec{NICs: 65}, "nics must be 0 to 64"},
		{Spec{GPUs: 100}, "gpus must be 0 to 64"},
		{Spec{NUMANodes: -2}, "numa-nodes must be 1 to 64"},
		{Spec{Generation: "cassini3"}, `generation must be cassini1 or cassini2, not "cassini3"`},
		{Spec{NICs: 1, VFsPerNIC: 65}, "vfs-per-nic must be 0 to 64"},
		{Spec{NICs: 8, VFsPerNIC: 64}, "more than 256 cxi devices"},
		{Spec{GPUs: 1, GPUVendor: "intel"}, `gpu vendor must be nvidia or amd, not "intel"`},
		{Spec{GPUs: 1, GPUModels: []string{"b200"}}, `unknown gpu model "b200" (known: h100, a100, mi250x, mi210)`},
		{Spec{GPUs: 1, GPUVendor: AMD, GPUModels: []string{"h100"}}, `gpu model "h100" is nvidia's, not amd's`},
		{Spec{NICs: 2, Faults: []Fault{LinkDown(2)}}, "no such NIC (cxi0 to cxi1)"},
		{Spec{NICs: 2, Faults: []Fault{MissingFile(0, "../etc")}}, "clean relative path"},
		{Spec{NICs: 2, Faults: []Fault{MissingFile(0, "/device")}}, "clean relative path"},
		{Spec{NICs: 2, Faults: []Fault{Garbage(0, "")}}, "clean relative path"},
		{Spec{NICs: 2, Faults: []Fault{{Kind: FaultLinkDown, NIC: 0, Path: "x"}}}, "takes no path"},
		{Spec{NICs: 2, Faults: []Fault{{Kind: 99, NIC: 0}}}, "unknown kind"},
	}
	for _, c := range cases {
		if err := c.spec.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", c.spec, err, c.want)
		}
		dir := filepath.Join(t.TempDir(), "out")
		if _, err := Write(dir, c.spec); err == nil {
			t.Errorf("Write(%+v) succeeded", c.spec)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Write(%+v) created %s for an invalid spec", c.spec, dir)
		}
	}
}

func TestWriteRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, Spec{NICs: 1}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Write into a non-empty dir: %v", err)
	}
	if _, err := Write(t.TempDir(), Spec{NICs: 1}); err != nil {
		t.Errorf("Write into an empty dir: %v", err)
	}
}

// snapshot maps every path under dir to its content or link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			snap[rel] = "-> " + target
			return err
		case d.IsDir():
			snap[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			snap[rel] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestWriteIsDeterministic(t *testing.T) {
	spec := Spec{NICs: 4, NUMANodes: 2, GPUs: 4, GPUModels: []string{"h100", "mi250x"}, VFsPerNIC: 1, Seed: 77}
	a, b := write(t, spec), write(t, spec)
	sa, sb := snapshot(t, a.Dir), snapshot(t, b.Dir)
	if !reflect.DeepEqual(sa, sb) {
		t.Error("two writes of one spec differ")
	}
	a.Dir, a.SysRoot, a.ProcRoot, a.DevRoot = "", "", "", ""
	b.Dir, b.SysRoot, b.ProcRoot, b.DevRoot = "", "", "", ""
	if !reflect.DeepEqual(a, b) {
		t.Error("two truths of one spec differ")
	}
	if c := write(t, Spec{NICs: 4, NUMANodes: 2, Seed: 78}); reflect.DeepEqual(c.NICs[0].Properties.NID, a.NICs[0].Properties.NID) &&
		c.NICs[0].NetDev == a.NICs[0].NetDev && c.NICs[1].NetDev == a.NICs[1].NetDev {
		t.Error("another seed writes the same NIDs and names")
	}
}

func TestWriteLinksAreRelativeAndResolve(t *testing.T) {
	truth := write(t, Spec{NICs: 3, NUMANodes: 2, GPUs: 3, GPUModels: []string{"mi210", "a100"}, VFsPerNIC: 2})
	root, err := filepath.EvalSymlinks(truth.Dir)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		links++
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			t.Errorf("%s -> %s is absolute", p, target)
		}
		resolved, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Errorf("%s -> %s does not resolve: %v", p, target, err)
		} else if !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
			t.Errorf("%s resolves outside the tree: %s", p, resolved)
		}
		if filepath.Base(target) != filepath.Base(resolved) {
			t.Errorf("%s -> %s: basename is not the target's name %s", p, target, filepath.Base(resolved))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if links != truth.Links {
		t.Errorf("found %d links, truth says %d", links, truth.Links)
	}
}

// The attribute formats are the driver's and the kernel's, byte for byte.
func TestWriteFormats(t *testing.T) {
	truth := write(t, Spec{NICs: 2, NUMANodes: 2, Seed: 3})
	n := truth.NICs[1]
	cls := filepath.Join(truth.SysRoot, n.ClassPath)
	want := map[string]string{
		"device/vendor":                                "0x1590\n",
		"device/device":                                "0x0371\n",
		"device/numa_node":                             "1\n",
		"device/properties/nid":                        fmt.Sprintf("0x%x\n", n.Properties.NID),
		"device/properties/pid_bits":                   "9\n",
		"device/properties/pid_count":                  "511\n",
		"device/properties/pid_granule":                "256\n",
		"device/properties/rdzv_get_idx":               "255\n",
		"device/properties/link":                       "1\n",
		"device/properties/speed":                      "200000\n",
		"device/properties/cassini_version":            "2.0\n",
		"device/properties/num_ptes":                   "2048\n",
		"device/properties/num_txqs":                   "1024\n",
		"device/properties/num_tgqs":                   "512\n",
		"device/properties/num_eqs":                    "2047\n",
		"device/properties/num_cts":                    "2047\n",
		"device/properties/num_acs":                    "1022\n",
		"device/properties/num_tles":                   "2048\n",
		"device/properties/num_les":                    "16384\n",
		"device/properties/hpc_mtu":                    "2112\n",
		"device/properties/rgids_avail":                "254\n",
		"device/uc/app_version":                        "1.6.0.326\n",
		"device/fru/description":                       "400Gb 2P NIC Mezz\n",
		"device/net/" + n.NetDev + "/addr_assign_type": "3\n",
		"device/net/" + n.NetDev + "/operstate":        "up\n",
		"device/net/" + n.NetDev + "/speed":            "200000\n",
		"device/net/" + n.NetDev + "/address":          n.MAC + "\n",
	}
	for rel, w := range want {
		if got := readFile(t, filepath.Join(cls, rel)); got != w {
			t.Errorf("%s = %q, want %q", rel, got, w)
		}
	}
	if pct := readFile(t, filepath.Join(cls, "device/properties/pct_eq")); pct == "0\n" {
		t.Error("pct_eq is 0 although the retry handler runs")
	}
	if u := readFile(t, filepath.Join(cls, "device/uevent")); !strings.Contains(u, "\nPCI_SLOT_NAME="+n.PCIAddress+"\n") ||
		!strings.HasPrefix(u, "DRIVER=cxi_ss1\n") {
		t.Errorf("uevent %q lacks DRIVER=cxi_ss1 or PCI_SLOT_NAME=%s", u, n.PCIAddress)
	}
	for link, base := range map[string]string{"device": n.PCIAddress, "device/driver": "cxi_ss1"} {
		target, err := os.Readlink(filepath.Join(cls, link))
		if err != nil || filepath.Base(target) != base {
			t.Errorf("%s -> %q (%v), want basename %s", link, target, err, base)
		}
	}
	if target, _ := os.Readlink(filepath.Join(cls, "device")); target != "../../../"+n.PCIAddress {
		t.Errorf("device link %q, want ../../../%s as the kernel writes it", target, n.PCIAddress)
	}
	// The MAC is locally administered unicast and carries the NID.
	var mac [6]byte
	if _, err := fmt.Sscanf(n.MAC, "%x:%x:%x:%x:%x:%x", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]); err != nil {
		t.Fatal(err)
	}
	if mac[0]&0x2 == 0 || mac[0]&0x1 != 0 {
		t.Errorf("MAC %s is not locally administered unicast", n.MAC)
	}
	if nid := uint32(mac[3]&0xf)<<16 | uint32(mac[4])<<8 | uint32(mac[5]); nid != n.Properties.NID {
		t.Errorf("MAC %s carries NID %#x, properties say %#x", n.MAC, nid, n.Properties.NID)
	}
	for _, node := range []string{"cxi0", "cxi1"} {
		if _, err := os.Stat(filepath.Join(truth.DevRoot, node)); err != nil {
			t.Errorf("dev placeholder: %v", err)
		}
	}
}

func TestHsnNamesAreNeverInIndexOrder(t *testing.T) {
	for nics := 2; nics <= 16; nics++ {
		for seed := range int64(40) {
			m := build(mustNormalize(t, Spec{NICs: nics, Seed: seed}))
			identity := true
			names := make([]string, nics)
			for i, n := range m.truth.NICs {
				names[i] = n.NetDev
				if n.NetDev != fmt.Sprintf("hsn%d", i) {
					identity = false
				}
			}
			if identity {
				t.Fatalf("%d NICs, seed %d: hsn names in cxi order", nics, seed)
			}
			slices.Sort(names)
			if len(slices.Compact(names)) != nics {
				t.Fatalf("%d NICs, seed %d: duplicate hsn names %v", nics, seed, names)
			}
		}
	}
}

func mustNormalize(t *testing.T, s Spec) Spec {
	t.Helper()
	s, err := s.normalized()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNUMASpreadAndRootComplexes(t *testing.T) {
	cases := []Spec{
		{NICs: 8, NUMANodes: 2, GPUs: 8},
		{NICs: 4, NUMANodes: 4, GPUs: 8},
		{NICs: 3, NUMANodes: 2, GPUs: 1},
		{NICs: 16, NUMANodes: 8, GPUs: 0},
		{NICs: 64, NUMANodes: 3, GPUs: 64},
	}
	for _, spec := range cases {
		m := build(mustNormalize(t, spec))
		count := make([]int, spec.NUMANodes)
		prev := 0
		addrs := map[string]bool{}
		for _, n := range m.truth.NICs {
			count[n.NUMANode]++
			if n.NUMANode < prev {
				t.Errorf("%+v: NUMA nodes not in index order", spec)
			}
			prev = n.NUMANode
			addrs[n.PCIAddress] = true
		}
		if slices.Max(count)-slices.Min(count) > 1 {
			t.Errorf("%+v: NICs per node %v are not even", spec, count)
		}
		rcNode := map[string]int{}
		for _, n := range m.truth.NICs {
			rcNode[n.RootComplex] = n.NUMANode
		}
		for _, g := range m.truth.GPUs {
			addrs[g.BDF] = true
			if node, ok := rcNode[g.RootComplex]; ok && node != g.NUMANode {
				t.Errorf("%+v: GPU %s on node %d shares %s with a NIC on node %d", spec, g.BDF, g.NUMANode, g.RootComplex, node)
			}
			if g.NearestNIC != "" {
				i := slices.IndexFunc(m.truth.NICs, func(n NIC) bool { return n.Name == g.NearestNIC })
				if m.truth.NICs[i].RootComplex != g.RootComplex {
					t.Errorf("%+v: GPU %s nearest NIC %s is on another root complex", spec, g.BDF, g.NearestNIC)
				}
			} else if _, ok := rcNode[g.RootComplex]; ok {
				t.Errorf("%+v: GPU %s has no nearest NIC but shares a root complex with one", spec, g.BDF)
			}
		}
		if len(addrs) != len(m.truth.NICs)+len(m.truth.GPUs) {
			t.Errorf("%+v: PCI addresses collide", spec)
		}
	}
}

func TestWriteGPUs(t *testing.T) {
	truth := write(t, Spec{NICs: 2, NUMANodes: 2, GPUs: 4, GPUModels: []string{"h100", "mi250x"}})
	var nv, amd int
	for _, g := range truth.GPUs {
		dir, err := filepath.EvalSymlinks(filepath.Join(truth.SysRoot, "bus/pci/devices", g.BDF))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(dir, "/"+g.RootComplex+"/") {
			t.Errorf("GPU %s at %s, not below %s", g.BDF, dir, g.RootComplex)
		}
		for attr, want := range map[string]string{
			"vendor": fmt.Sprintf("0x%04x\n", g.VendorID), "device": fmt.Sprintf("0x%04x\n", g.DeviceID),
			"class": fmt.Sprintf("0x%06x\n", g.Class), "numa_node": fmt.Sprintf("%d\n", g.NUMANode),
		} {
			if got := readFile(t, filepath.Join(dir, attr)); got != want {
				t.Errorf("GPU %s %s = %q, want %q", g.BDF, attr, got, want)
			}
		}
		for _, n := range append(g.DevNodes, g.SharedDevNodes...) {
			if _, err := os.Stat(filepath.Join(truth.DevRoot, n)); err != nil {
				t.Errorf("GPU %s device node: %v", g.BDF, err)
			}
		}
		switch g.Vendor {
		case NVIDIA:
			info := readFile(t, filepath.Join(truth.ProcRoot, "driver/nvidia/gpus", g.BDF, "information"))
			for _, line := range []string{"Model: \t\t NVIDIA H100 80GB HBM3\n", "Bus Location: \t " + g.BDF + "\n",
				fmt.Sprintf("Device Minor: \t %d\n", nv)} {
				if !strings.Contains(info, line) {
					t.Errorf("GPU %s information lacks %q:\n%s", g.BDF, line, info)
				}
			}
			if g.DevNodes[0] != fmt.Sprintf("nvidia%d", nv) || g.Class != 0x030200 {
				t.Errorf("GPU %s: nodes %v class %#x", g.BDF, g.DevNodes, g.Class)
			}
			nv++
		case AMD:
			if got := readFile(t, filepath.Join(dir, "product_name")); got != "AMD Instinct MI250X\n" {
				t.Errorf("GPU %s product_name %q", g.BDF, got)
			}
			render := fmt.Sprintf("renderD%d", 128+amd)
			if _, err := os.Stat(filepath.Join(dir, "drm", render, "dev")); err != nil {
				t.Errorf("GPU %s: %v", g.BDF, err)
			}
			if _, err := os.Stat(filepath.Join(truth.SysRoot, "class/drm", render, "device/product_name")); err != nil {
				t.Errorf("GPU %s: class/drm/%s: %v", g.BDF, render, err)
			}
			amd++
		}
	}
	if nv != 2 || amd != 2 {
		t.Errorf("%d NVIDIA and %d AMD GPUs, want 2 and 2", nv, amd)
	}
}

// TestWriteCassini1VFs writes Cassini-1 NICs with VFs: a VF keeps the PF's
// PCI IDs (17db:0501) and differs only in its BAR 0, 512 MiB against the
// PF's 2 GiB, which the resource file gives as in the kernel's
// resource_show. The driver tells them apart by that size alone.
func TestWriteCassini1VFs(t *testing.T) {
	cases := []struct {
		gen        string
		vfVendor   uint16
		vfDevice   uint16
		cassiniVer string
	}{
		{Cassini1, 0x17db, 0x0501, "1.1"},
		{Cassini2, 0x1590, 0x0372, "2.0"},
	}
	for _, c := range cases {
		t.Run(c.gen, func(t *testing.T) {
			truth := write(t, Spec{NICs: 2, NUMANodes: 1, Generation: c.gen, VFsPerNIC: 2})
			if len(truth.NICs) != 6 {
				t.Fatalf("%d cxi devices, want 2 PFs and 4 VFs", len(truth.NICs))
			}
			for _, n := range truth.NICs {
				wantSize, wantVendor, wantDevice := uint64(2<<30), truth.NICs[0].VendorID, truth.NICs[0].DeviceID
				if n.VF {
					wantSize, wantVendor, wantDevice = 512<<20, c.vfVendor, c.vfDevice
				}
				dir := filepath.Join(truth.SysRoot, n.PCIPath)
				got := bar0Size(t, readFile(t, filepath.Join(dir, "resource")))
				if got != wantSize || n.BAR0Size != wantSize {
					t.Errorf("%s: BAR 0 of %d bytes (truth %d), want %d", n.Name, got, n.BAR0Size, wantSize)
				}
				ids := readFile(t, filepath.Join(dir, "vendor")) + readFile(t, filepath.Join(dir, "device"))
				if want := fmt.Sprintf("0x%04x\n0x%04x\n", wantVendor, wantDevice); ids != want ||
					n.VendorID != wantVendor || n.DeviceID != wantDevice {
					t.Errorf("%s: PCI IDs %q (truth %04x:%04x), want %q", n.Name, ids, n.VendorID, n.DeviceID, want)
				}
				if v := n.Properties.CassiniVersion; v != c.cassiniVer {
					t.Errorf("%s: cassini_version %s, want %s", n.Name, v, c.cassiniVer)
				}
				if _, err := os.Lstat(filepath.Join(dir, "physfn")); (err == nil) != n.VF {
					t.Errorf("%s (VF %v): physfn link: %v", n.Name, n.VF, err)
				}
			}
			pf := filepath.Join(truth.SysRoot, truth.NICs[0].PCIPath)
			if got := readFile(t, filepath.Join(pf, "sriov_numvfs")); got != "2\n" {
				t.Errorf("sriov_numvfs of the first PF = %q", got)
			}
		})
	}
}

// bar0Size returns the size of BAR 0 from a resource file: end - start + 1
// of its first "start end flags" line.
func bar0Size(t *testing.T, resource string) uint64 {
	t.Helper()
	line, _, _ := strings.Cut(resource, "\n")
	var start, end, flags uint64
	if _, err := fmt.Sscanf(line, "0x%x 0x%x 0x%x", &start, &end, &flags); err != nil || end < start {
		t.Fatalf("resource line %q: %v", line, err)
	}
	return end - start + 1
}

func TestFaults(t *testing.T) {
	truth := write(t, Spec{NICs: 3, NUMANodes: 1, VFsPerNIC: 1, Faults: []Fault{
		MissingFile(0, "device/properties/nid"),
		Garbage(1, "device/properties/speed"),
		{Kind: FaultGarbage, NIC: 1, Path: "netdev/operstate", Value: "sideways\n"},
		LinkDown(2),
		NoRetryHandler(2),
		MissingFile(4, "device"),
	}})
	cls := func(i int) string { return filepath.Join(truth.SysRoot, truth.NICs[i].ClassPath) }
	if _, err := os.Stat(filepath.Join(cls(0), "device/properties/nid")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("nid of cxi0 still there: %v", err)
	}
	if got := readFile(t, filepath.Join(cls(1), "device/properties/speed")); got != DefaultGarbage {
		t.Errorf("speed of cxi1 = %q", got)
	}
	if got := readFile(t, filepath.Join(truth.SysRoot, "class/net", truth.NICs[1].NetDev, "operstate")); got != "sideways\n" {
		t.Errorf("operstate of cxi1's netdev = %q", got)
	}
	if got := readFile(t, filepath.Join(cls(2), "device/properties/link")); got != "0\n" {
		t.Errorf("link of cxi2 = %q", got)
	}
	if got := readFile(t, filepath.Join(cls(2), "device/properties/pct_eq")); got != "0\n" {
		t.Errorf("pct_eq of cxi2 = %q", got)
	}
	nd := filepath.Join(truth.SysRoot, "class/net", truth.NICs[2].NetDev)
	if got := readFile(t, filepath.Join(nd, "operstate")) + readFile(t, filepath.Join(nd, "carrier")); got != "down\n0\n" {
		t.Errorf("netdev of cxi2: operstate and carrier %q", got)
	}
	if _, err := os.Lstat(filepath.Join(cls(4), "device")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("device link of cxi4 still there: %v", err)
	}
	if tn := truth.NICs[2]; tn.Properties.Link || tn.Properties.PCTEq != 0 || tn.OperState != "down" || len(tn.Faults) != 2 {
		t.Errorf("truth of cxi2 does not show its faults: %+v", tn)
	}

	for _, f := range []Fault{MissingFile(0, "device/properties/no_such_file"), Garbage(3, "netdev/operstate")} {
		if _, err := Write(filepath.Join(t.TempDir(), "x"), Spec{NICs: 3, VFsPerNIC: 1, Faults: []Fault{f}}); err == nil {
			t.Errorf("fault %s on a path that does not exist: no error", f)
		}
	}
}

func TestParseFault(t *testing.T) {
	cases := []struct {
		in      string
		want    Fault
		wantErr string
	}{
		{in: "link-down:cxi3", want: LinkDown(3)},
		{in: "no-retry-handler:cxi0", want: NoRetryHandler(0)},
		{in: "missing:cxi1:device/properties/nid", want: MissingFile(1, "device/properties/nid")},
		{in: "garbage:cxi2:device/properties/speed", want: Garbage(2, "device/properties/speed")},
		{in: "garbage:cxi2:netdev/operstate=sideways", want: Fault{Kind: FaultGarbage, NIC: 2, Path: "netdev/operstate", Value: "sideways"}},
		{in: "melt:cxi0", wantErr: "kind must be"},
		{in: "link-down:hsn0", wantErr: "want a NIC name cxiN"},
		{in: "link-down:cxi", wantErr: "want a NIC name cxiN"},
		{in: "link-down:cxi0:device", wantErr: "takes no path"},
		{in: "missing:cxi0", wantErr: "want missing:cxiN:RELPATH"},
	}
	for _, c := range cases {
		got, err := ParseFault(c.in)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseFault(%q) = %v, %v; want an error containing %q", c.in, got, err, c.wantErr)
			}
		case err != nil || got != c.want:
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if err == nil {
			if back, err := ParseFault(strings.Replace(got.String(), `="sideways"`, "=sideways", 1)); err != nil || back != got {
				t.Errorf("ParseFault(%q.String()) = %+v, %v", c.in, back, err)
			}
		}
	}
}

func TestSetLinkAndRetryHandler(t *testing.T) {
	truth := write(t, Spec{NICs: 2, NUMANodes: 1, VFsPerNIC: 1})
	n := truth.NICs[1]
	props := filepath.Join(truth.SysRoot, n.ClassPath, "device/properties")
	nd := filepath.Join(truth.SysRoot, "class/net", n.NetDev)
	state := func() string {
		return readFile(t, filepath.Join(props, "link")) + readFile(t, filepath.Join(nd, "operstate")) +
			readFile(t, filepath.Join(nd, "carrier")) + readFile(t, filepath.Join(nd, "speed"))
	}
	if err := SetLink(truth.Dir, "cxi1", false); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "0\ndown\n0\n-1\n" {
		t.Errorf("after SetLink down: %q", got)
	}
	if err := SetLink(truth.Dir, "cxi1", true); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "1\nup\n1\n200000\n" {
		t.Errorf("after SetLink up: %q", got)
	}
	if err := SetRetryHandler(truth.Dir, "cxi1", false); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(props, "pct_eq")); got != "0\n" {
		t.Errorf("pct_eq after stop: %q", got)
	}
	if err := SetRetryHandler(truth.Dir, "cxi1", true); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(props, "pct_eq")); got != fmt.Sprintf("%d\n", n.Properties.PCTEq) {
		t.Errorf("pct_eq after start: %q, want %d", got, n.Properties.PCTEq)
	}
	// A VF has no netdev; its link still flips.
	if err := SetLink(truth.Dir, "cxi3", false); err != nil {
		t.Errorf("SetLink on a VF: %v", err)
	}
	// No temporary files are left behind.
	for _, dir := range []string{props, nd} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("leftover %s in %s", e.Name(), dir)
			}
		}
	}
	for _, bad := range []string{"cxi9", "../cxi0", "", "cxi0/.."} {
		if err := SetLink(truth.Dir, bad, true); err == nil {
			t.Errorf("SetLink(%q) succeeded", bad)
		}
	}
}

// An hsn netdev set down changes its operstate and carrier, not the NIC's
// own link.
func TestSetOperState(t *testing.T) {
	truth := write(t, Spec{NICs: 2, NUMANodes: 1})
	n := truth.NICs[0]
	nd := filepath.Join(truth.SysRoot, "class/net", n.NetDev)
	link := filepath.Join(truth.SysRoot, n.ClassPath, "device/properties/link")
	state := func() string {
		return readFile(t, link) + readFile(t, filepath.Join(nd, "operstate")) + readFile(t, filepath.Join(nd, "carrier"))
	}
	for _, tc := range []struct {
		up   bool
		want string
	}{{false, "1\ndown\n0\n"}, {true, "1\nup\n1\n"}} {
		if err := SetOperState(truth.Dir, n.NetDev, tc.up); err != nil {
			t.Fatal(err)
		}
		if got := state(); got != tc.want {
			t.Errorf("after SetOperState %v: %q, want %q", tc.up, got, tc.want)
		}
	}
	if err := SetOperState(truth.Dir, "hsn9", false); err == nil {
		t.Error("SetOperState of a netdev the tree lacks succeeded")
	}
}

// TestWriteMaxima writes NICs whose resource maxima (num_*) are below the
// driver's defaults, a PF and a VF, and refuses maxima of no NIC or out of
// the 16-bit range the service descriptor has.
func TestWriteMaxima(t *testing.T) {
	low := ResourceMaxima{LEs: 8192, TLEs: 1024}
	truth := write(t, Spec{NICs: 2, VFsPerNIC: 1, Seed: 4, Maxima: map[int]ResourceMaxima{1: low, 3: {PTEs: 1}}})
	want := map[string]ResourceMaxima{
		"cxi0": DefaultMaxima,
		"cxi1": {PTEs: 2048, TXQs: 1024, TGQs: 512, EQs: 2047, CTs: 2047, ACs: 1022, TLEs: 1024, LEs: 8192},
		"cxi2": DefaultMaxima,
		"cxi3": {PTEs: 1, TXQs: 1024, TGQs: 512, EQs: 2047, CTs: 2047, ACs: 1022, TLEs: 2048, LEs: 16384},
	}
	for _, n := range truth.NICs {
		w := want[n.Name]
		p := n.Properties
		if got := (ResourceMaxima{PTEs: p.PTEs, TXQs: p.TXQs, TGQs: p.TGQs, EQs: p.EQs, CTs: p.CTs, ACs: p.ACs,
			TLEs: p.TLEs, LEs: p.LEs}); got != w {
			t.Errorf("%s: truth %+v, want %+v", n.Name, got, w)
		}
		props := filepath.Join(truth.SysRoot, n.ClassPath, "device/properties")
		for name, v := range w.fields() {
			if got := readFile(t, filepath.Join(props, "num_"+name)); got != fmt.Sprintf("%d\n", *v) {
				t.Errorf("%s: num_%s = %q, want %d", n.Name, name, got, *v)
			}
		}
	}
	for _, c := range []struct {
		maxima map[int]ResourceMaxima
		want   string
	}{
		{map[int]ResourceMaxima{4: low}, "maxima of cxi4: no such NIC (cxi0 to cxi3)"},
		{map[int]ResourceMaxima{-1: low}, "maxima of cxi-1: no such NIC"},
		{map[int]ResourceMaxima{0: {LEs: -1}}, "maxima of cxi0: num_les -1 is not 0 to 65535"},
		{map[int]ResourceMaxima{0: {TLEs: 65536}}, "maxima of cxi0: num_tles 65536 is not 0 to 65535"},
	} {
		spec := Spec{NICs: 2, VFsPerNIC: 1, Maxima: c.maxima}
		if err := spec.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(maxima %v) = %v, want %q", c.maxima, err, c.want)
		}
	}
}

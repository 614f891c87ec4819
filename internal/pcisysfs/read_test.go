package pcisysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// cpusOf is the local_cpulist mocksysfs writes for a function on node.
func cpusOf(node int) []int {
	cpus := make([]int, 32)
	for i := range cpus {
		cpus[i] = node*32 + i
	}
	return cpus
}

// TestReadFunction reads NIC functions (PFs with VFs, and the VFs), and
// GPUs, of a mock node through bus/pci/devices and through a class
// device's link, with and without readable links: the same values come
// out, the driver from DRIVER= and the SR-IOV links through PCI_SLOT_NAME
// where links cannot be read.
func TestReadFunction(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 2, VFsPerNIC: 2,
		GPUModels: []string{"h100", "mi250x"}, Seed: 3})
	const all = AttrVendor | AttrDevice | AttrClass | AttrNUMANode | AttrLocalCPUs | AttrDriver | AttrResources | AttrSRIOV
	nic := func(i int) Function {
		n := truth.NICs[i]
		f := Function{VendorID: n.VendorID, DeviceID: n.DeviceID, Class: 0x020000, NUMANode: n.NUMANode,
			LocalCPUs: cpusOf(n.NUMANode), Driver: n.Driver, PhysFn: n.PhysFn}
		for _, vf := range truth.NICs {
			if vf.PhysFn == n.PCIAddress {
				f.VirtFns = append(f.VirtFns, vf.PCIAddress)
			}
		}
		return f
	}
	gpu := func(j int) Function {
		g := truth.GPUs[j]
		return Function{VendorID: g.VendorID, DeviceID: g.DeviceID, Class: g.Class, NUMANode: g.NUMANode,
			LocalCPUs: cpusOf(g.NUMANode), Driver: g.Driver}
	}
	cases := []struct {
		name  string
		dir   string
		attrs Attr
		want  Function
		bar0  uint64 // length of BAR 0 when AttrResources is asked
	}{
		{"NIC PF", BusPCIDevices + "/" + truth.NICs[0].PCIAddress, all, nic(0), truth.NICs[0].BAR0Size},
		{"NIC VF", BusPCIDevices + "/" + truth.NICs[5].PCIAddress, all, nic(5), truth.NICs[5].BAR0Size},
		{"NIC PF through its class device", "class/cxi/cxi1/device", all, nic(1), truth.NICs[1].BAR0Size},
		{"NVIDIA GPU", BusPCIDevices + "/" + truth.GPUs[0].BDF, all &^ AttrResources, gpu(0), 0},
		{"AMD GPU", BusPCIDevices + "/" + truth.GPUs[1].BDF, all &^ AttrResources, gpu(1), 0},
		{"IDs only", BusPCIDevices + "/" + truth.NICs[1].PCIAddress, AttrVendor | AttrDevice,
			Function{VendorID: 0x1590, DeviceID: 0x0371, NUMANode: -1}, 0},
	}
	sys := os.DirFS(truth.SysRoot)
	for fsName, fsys := range map[string]fs.FS{"DirFS": sys, "no readlink": mocksysfs.NoLinkFS{FS: sys},
		"MapFS": loadMapFS(t, truth.SysRoot)} {
		for _, c := range cases {
			t.Run(fsName+"/"+c.name, func(t *testing.T) {
				got, problems := ReadFunction(fsys, c.dir, c.attrs)
				if len(problems) > 0 {
					t.Fatalf("problems %v", problems)
				}
				if got.Dir != c.dir {
					t.Errorf("Dir %q, want %q", got.Dir, c.dir)
				}
				if c.attrs&AttrResources != 0 {
					if len(got.Resources) != 13 || got.Resources[0].Len() != c.bar0 {
						t.Errorf("%d resources, BAR 0 %d bytes; want 13 and %d", len(got.Resources),
							got.Resources[0].Len(), c.bar0)
					}
				}
				got.Dir, got.Resources = "", nil
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("got  %+v\nwant %+v", got, c.want)
				}
			})
		}
	}
}

// TestReadFunctionProblems breaks one PF and one VF of a mock node file by
// file: required attributes give an *AttrError naming the file, in the
// order the Attr constants list them; optional ones may be missing.
func TestReadFunctionProblems(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 1, VFsPerNIC: 1, Seed: 5})
	base := loadMapFS(t, truth.SysRoot)
	const all = AttrVendor | AttrDevice | AttrClass | AttrNUMANode | AttrLocalCPUs | AttrDriver | AttrResources | AttrSRIOV
	for _, c := range problemCases(truth.NICs[0], truth.NICs[1]) {
		t.Run(c.name, func(t *testing.T) {
			fsys := maps.Clone(base)
			for p, f := range c.edit {
				if f == nil {
					delete(fsys, p)
					continue
				}
				if f.Mode == 0 {
					f.Mode = 0o444
				}
				fsys[p] = f
			}
			dir := BusPCIDevices + "/" + c.fn.PCIAddress
			got, problems := ReadFunction(fsys, dir, all)
			var want []string
			for _, p := range c.problems {
				want = append(want, dir+"/"+p.file)
			}
			if paths := problemPaths(t, problems); !slices.Equal(paths, want) {
				t.Fatalf("problems %v, want %q", problems, want)
			}
			for i, p := range c.problems {
				if !errors.Is(problems[i], p.err) {
					t.Errorf("problem %v does not match %v", problems[i], p.err)
				}
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

// problem is one problem ReadFunction should report.
type problem struct {
	file string // relative to the function's directory
	err  error
}

// problemCase breaks a function's tree by edit and says what ReadFunction
// reports.
type problemCase struct {
	name     string
	fn       mocksysfs.NIC              // the function read: the PF unless said
	edit     map[string]*fstest.MapFile // nil removes
	problems []problem
	check    func(t *testing.T, f Function)
}

// problemCases are the faults TestReadFunctionProblems injects on the PF pf
// and its VF vf.
func problemCases(pf, vf mocksysfs.NIC) []problemCase {
	pfFile := func(name string) string { return pf.PCIPath + "/" + name }
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	cases := []problemCase{
		{name: "as written"},
		{name: "garbage vendor", edit: map[string]*fstest.MapFile{pfFile("vendor"): {Data: []byte(mocksysfs.DefaultGarbage)}},
			problems: []problem{{"vendor", ErrInvalidValue}}},
		{name: "missing device", edit: map[string]*fstest.MapFile{pfFile("device"): nil},
			problems: []problem{{"device", ErrMissing}}},
		{name: "class wider than 24 bits", edit: map[string]*fstest.MapFile{pfFile("class"): {Data: []byte("0x1020000\n")}},
			problems: []problem{{"class", ErrInvalidValue}}},
		{name: "no numa_node is node -1", edit: map[string]*fstest.MapFile{pfFile("numa_node"): nil},
			check: func(t *testing.T, f Function) {
				if f.NUMANode != -1 {
					t.Errorf("NUMANode %d, want -1", f.NUMANode)
				}
			}},
		{name: "numa_node -7", edit: map[string]*fstest.MapFile{pfFile("numa_node"): {Data: []byte("-7\n")}},
			problems: []problem{{"numa_node", ErrInvalidValue}}},
		{name: "no local_cpulist", edit: map[string]*fstest.MapFile{pfFile("local_cpulist"): nil},
			check: func(t *testing.T, f Function) {
				if f.LocalCPUs != nil {
					t.Errorf("LocalCPUs %v, want nil", f.LocalCPUs)
				}
			}},
		{name: "garbage local_cpulist", edit: map[string]*fstest.MapFile{pfFile("local_cpulist"): {Data: []byte("0-x\n")}},
			problems: []problem{{"local_cpulist", ErrInvalidValue}}},
		{name: "no resource file", edit: map[string]*fstest.MapFile{pfFile("resource"): nil},
			problems: []problem{{"resource", ErrMissing}}},
		{name: "garbage after BAR 0", edit: map[string]*fstest.MapFile{pfFile("resource"): {
			Data: []byte("0x0000200000000000 0x000020007fffffff 0x000000000014220c\ngarbage\n")}},
			problems: []problem{{"resource", ErrInvalidValue}}},
		{name: "no driver bound", edit: map[string]*fstest.MapFile{pfFile("driver"): nil,
			pfFile("uevent"): {Data: []byte("PCI_SLOT_NAME=" + pf.PCIAddress + "\n")}},
			check: func(t *testing.T, f Function) {
				if f.Driver != "" {
					t.Errorf("Driver %q, want none", f.Driver)
				}
			}},
		{name: "virtfn0 to no PCI function", edit: map[string]*fstest.MapFile{pfFile("virtfn0"): link("../virtio0")},
			problems: []problem{{"virtfn0", ErrInvalidValue}}},
		{name: "three at once, in order", edit: map[string]*fstest.MapFile{pfFile("resource"): nil,
			pfFile("numa_node"): {Data: []byte("node0\n")}, pfFile("vendor"): {Data: []byte("0x10000\n")}},
			problems: []problem{{"vendor", ErrInvalidValue}, {"numa_node", ErrInvalidValue}, {"resource", ErrMissing}}},
		{name: "VF without physfn is a PF", fn: vf, edit: map[string]*fstest.MapFile{vf.PCIPath + "/physfn": nil},
			check: func(t *testing.T, f Function) {
				if f.PhysFn != "" {
					t.Errorf("PhysFn %q, want none", f.PhysFn)
				}
			}},
		{name: "VF's physfn to no PCI function", fn: vf, edit: map[string]*fstest.MapFile{vf.PCIPath + "/physfn": link("../../x")},
			problems: []problem{{"physfn", ErrInvalidValue}}},
	}
	for i := range cases {
		if cases[i].fn.Name == "" {
			cases[i].fn = pf
		}
	}
	return cases
}

func TestReadAttr(t *testing.T) {
	fsys := fstest.MapFS{
		"small": {Data: []byte("0x1590\n")},
		"page":  {Data: []byte(strings.Repeat("x", maxAttrSize))},
		"big":   {Data: []byte(strings.Repeat("x", maxAttrSize+1))},
	}
	for _, c := range []struct {
		fsys fs.FS
		name string
		want string
		err  error
	}{
		{fsys, "small", "0x1590\n", nil},
		{fsys, "page", strings.Repeat("x", maxAttrSize), nil},
		{fsys, "big", "", ErrInvalidValue},
		{fsys, "missing", "", fs.ErrNotExist},
		{stallFS{}, "stuck", "", io.ErrNoProgress},
	} {
		got, err := ReadAttr(c.fsys, c.name)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("ReadAttr(%s) = %d bytes, %v; want %d bytes, %v", c.name, len(got), err, len(c.want), c.err)
		}
	}
}

// stallFS opens files whose reads return nothing, and no error, forever.
type stallFS struct{}

func (stallFS) Open(name string) (fs.File, error) { return stallFile{}, nil }

type stallFile struct{}

func (stallFile) Stat() (fs.FileInfo, error) { return stallInfo{}, nil }
func (stallFile) Read([]byte) (int, error)   { return 0, nil }
func (stallFile) Close() error               { return nil }

type stallInfo struct{}

func (stallInfo) Name() string       { return "stuck" }
func (stallInfo) Size() int64        { return 0 }
func (stallInfo) Mode() fs.FileMode  { return 0o444 }
func (stallInfo) ModTime() time.Time { return time.Time{} }
func (stallInfo) IsDir() bool        { return false }
func (stallInfo) Sys() any           { return nil }

func TestLinkedAddress(t *testing.T) {
	symlink := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	fsys := fstest.MapFS{
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0/uevent": {Data: []byte("DRIVER=cxi_ss1\n")},
		"link/device":           symlink("../devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
		"upper/device":          symlink("../devices/pci0000:00/0000:00:01.0/0000:01:00.0/../0000:0A:00.0"),
		"virtio/device":         symlink("../devices/virtio0"),
		"uevent/device/uevent":  {Data: []byte("DRIVER=igb\nPCI_SLOT_NAME=0000:02:00.1\n")},
		"noslot/device/uevent":  {Data: []byte("DRIVER=igb\n")},
		"garbled/device/uevent": {Data: []byte("pci slot\n")},
	}
	for _, c := range []struct {
		link   string
		addr   string
		driver string // DRIVER= of the uevent read, when one was
		err    error
	}{
		{link: "link/device", addr: "0000:01:00.0"},
		{link: "upper/device", addr: "0000:0a:00.0"}, // the canonical form
		{link: "virtio/device", err: ErrInvalidValue},
		{link: "missing/device", err: ErrMissing},
		{link: "uevent/device", addr: "0000:02:00.1", driver: "igb"},
		{link: "noslot/device", err: ErrInvalidValue},
		{link: "garbled/device", err: ErrInvalidValue},
	} {
		addr, env, err := LinkedAddress(fsys, c.link)
		if addr != c.addr || env["DRIVER"] != c.driver || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("LinkedAddress(%s) = %q %v, %v; want %q DRIVER=%q, %v", c.link, addr, env, err, c.addr, c.driver, c.err)
		}
		var ae *AttrError
		if err != nil && (!errors.As(err, &ae) || !strings.HasPrefix(ae.Path, c.link)) {
			t.Errorf("LinkedAddress(%s): error %v does not name the link", c.link, err)
		}
	}
}

func TestAttrError(t *testing.T) {
	missing := NewAttrError(SysFS, "class/cxi/cxi0/device/vendor",
		&fs.PathError{Op: "open", Path: "/sys/class/cxi/cxi0/device/vendor", Err: fs.ErrNotExist})
	if !errors.Is(missing, ErrMissing) || errors.Is(missing, ErrInvalidValue) || !errors.Is(missing, fs.ErrNotExist) {
		t.Errorf("missing file %v: want ErrMissing and fs.ErrNotExist, not ErrInvalidValue", missing)
	}
	if got, want := missing.Error(), "sysfs class/cxi/cxi0/device/vendor: file does not exist"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	_, perr := ParseID("zz")
	bad := &AttrError{Path: "p", Err: perr}
	if errors.Is(bad, ErrMissing) || !errors.Is(bad, ErrInvalidValue) {
		t.Errorf("garbage %v: want ErrInvalidValue, not ErrMissing", bad)
	}
	if !strings.HasPrefix(bad.Error(), "sysfs p: ") {
		t.Errorf("an AttrError without FS is sysfs's: %q", bad.Error())
	}
	proc := &AttrError{FS: "procfs", Path: "driver/nvidia/gpus", Err: fmt.Errorf("x: %w", fs.ErrPermission)}
	if !strings.HasPrefix(proc.Error(), "procfs driver/nvidia/gpus: ") || !errors.Is(proc, fs.ErrPermission) {
		t.Errorf("procfs error %q", proc.Error())
	}
}

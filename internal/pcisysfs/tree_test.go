package pcisysfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestTreeMockNode lists and locates the functions of a mock node through
// the bus/pci/devices links, without readable links, without
// bus/pci/devices, and without either: the same functions and topology come
// out, and Dir is the link where it exists, else the directory below
// devices/.
func TestTreeMockNode(t *testing.T) {
	truth := writeTree(t, mocksysfs.Spec{NICs: 4, NUMANodes: 2, GPUs: 2, VFsPerNIC: 1, Seed: 9})
	sys := os.DirFS(truth.SysRoot)
	want, problems, err := NewTree(sys).List()
	if err != nil || len(problems) > 0 {
		t.Fatalf("List: %v %v", problems, err)
	}
	slices.Sort(want)
	type located struct{ addr, root, dir string }
	var fns []located
	for _, n := range truth.NICs {
		fns = append(fns, located{n.PCIAddress, n.RootComplex, n.PCIPath})
	}
	for _, g := range truth.GPUs {
		fns = append(fns, located{addr: g.BDF, root: g.RootComplex})
	}
	for _, f := range fns {
		if !slices.Contains(want, f.addr) {
			t.Fatalf("List %v misses %s", want, f.addr)
		}
	}
	for name, c := range map[string]struct {
		fsys   fs.FS
		viaBus bool // Dir and Locate give bus/pci/devices/<addr>
	}{
		"links":                {sys, true},
		"no readlink":          {mocksysfs.NoLinkFS{FS: sys}, true},
		"no bus/pci/devices":   {mocksysfs.HideFS{FS: sys, Hidden: []string{BusPCIDevices}}, false},
		"neither, by the walk": {mocksysfs.NoLinkFS{FS: mocksysfs.HideFS{FS: sys, Hidden: []string{BusPCIDevices}}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			tree := NewTree(c.fsys)
			got, problems, err := tree.List()
			slices.Sort(got)
			if err != nil || len(problems) > 0 || !slices.Equal(got, want) {
				t.Fatalf("List = %v %v %v, want %v", got, problems, err, want)
			}
			for _, f := range fns {
				dir, topo, err := tree.Locate(f.addr)
				if err != nil || topo.Root != f.root || len(topo.Bridges) != 1 {
					t.Errorf("Locate(%s) = %q %q, %v; want below %s through one bridge", f.addr, dir, topo, err, f.root)
					continue
				}
				wantDir := BusPCIDevices + "/" + f.addr
				if !c.viaBus {
					wantDir = "devices/" + topo.String() + "/" + f.addr
				}
				if dir != wantDir || tree.Dir(f.addr) != wantDir {
					t.Errorf("%s: Locate dir %q, Dir %q; want %q", f.addr, dir, tree.Dir(f.addr), wantDir)
				}
				if f.dir != "" && path.Join("devices", topo.String(), f.addr) != f.dir {
					t.Errorf("%s: topology %q, generator wrote %s", f.addr, topo, f.dir)
				}
				bridge, problems := ReadFunction(c.fsys, tree.Dir(topo.Bridges[0]), AttrClass)
				if len(problems) > 0 || bridge.Class>>8 != 0x0604 {
					t.Errorf("%s: bridge %s class %#06x, %v; want a PCI bridge", f.addr, topo.Bridges[0], bridge.Class, problems)
				}
			}
		})
	}
}

// TestTreeEdgeCases runs List and Locate on small hand-made trees: an Intel
// VMD domain (a host bridge below a root port), a bus/pci/devices link to
// another function, an entry that is not a PCI address, and trees with
// nothing to list.
func TestTreeEdgeCases(t *testing.T) {
	symlink := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	dir := &fstest.MapFile{Mode: fs.ModeDir | 0o755}
	vmd := fstest.MapFS{
		"devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0/vendor": {Data: []byte("0x144d\n")},
		"devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0/net":    dir,
		"devices/pci0000:00/0000:00:1f.0/not-a-function/0000:05:00.0":                    dir,
	}
	wrongLink := fstest.MapFS{
		"devices/pci0000:00/0000:00:01.0/0000:01:00.0": dir,
		"devices/pci0000:00/0000:00:01.0/0000:02:00.0": dir,
		"bus/pci/devices/0000:01:00.0":                 symlink("../../../devices/pci0000:00/0000:00:01.0/0000:02:00.0"),
		"bus/pci/devices/bogus":                        symlink("../../../devices/pci0000:00/0000:00:01.0"),
		"bus/pci/devices/0000:03:00.0":                 symlink("../../../devices/platform/x"),
	}
	cases := []struct {
		name     string
		fsys     fs.FS
		list     []string // nil: List fails
		problems []string
		locate   string
		dir      string
		topo     Topology
		err      error
	}{
		{name: "VMD", fsys: vmd, list: []string{"0000:00:0e.0", "0000:00:1f.0", "10000:e0:06.0", "10000:e1:00.0"},
			locate: "10000:e1:00.0", dir: "devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
			topo: Topology{Root: "pci0000:00", Bridges: []string{"0000:00:0e.0", "pci10000:e0", "10000:e0:06.0"}}},
		{name: "VMD, a function that is not there", fsys: vmd, list: []string{"0000:00:0e.0", "0000:00:1f.0", "10000:e0:06.0", "10000:e1:00.0"},
			locate: "0000:05:00.0", err: ErrMissing},
		{name: "link to another function", fsys: wrongLink, list: []string{"0000:01:00.0", "0000:03:00.0"},
			problems: []string{BusPCIDevices + "/bogus"}, locate: "0000:01:00.0", dir: BusPCIDevices + "/0000:01:00.0",
			err: ErrInvalidValue},
		{name: "link out of the PCI tree", fsys: wrongLink, list: []string{"0000:01:00.0", "0000:03:00.0"},
			problems: []string{BusPCIDevices + "/bogus"}, locate: "0000:03:00.0", dir: BusPCIDevices + "/0000:03:00.0",
			err: ErrInvalidValue},
		{name: "empty tree", fsys: fstest.MapFS{"class": dir}, locate: "0000:01:00.0", err: ErrMissing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tree := NewTree(c.fsys)
			got, problems, err := tree.List()
			slices.Sort(got)
			switch {
			case c.list == nil && !errors.Is(err, ErrMissing):
				t.Errorf("List = %v, %v; want ErrMissing", got, err)
			case c.list != nil && (err != nil || !slices.Equal(got, c.list)):
				t.Errorf("List = %v, %v; want %v", got, err, c.list)
			}
			if paths := problemPaths(t, problems); !slices.Equal(paths, c.problems) {
				t.Errorf("List problems %v, want %v", problems, c.problems)
			}
			d, topo, err := tree.Locate(c.locate)
			if d != c.dir || topo.String() != c.topo.String() || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Errorf("Locate(%s) = %q %q, %v; want %q %q, %v", c.locate, d, topo, err, c.dir, c.topo, c.err)
			}
		})
	}
}

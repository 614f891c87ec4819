package pcisysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Topology is a PCI function's place in the PCIe hierarchy.
type Topology struct {
	// Root is the sysfs name of the PCIe root complex (host bridge),
	// "pci0000:20"; empty when unknown.
	Root string
	// Bridges are the PCI bridge functions from the root complex down to
	// the function, the function itself excluded: the root port first, then
	// any switch ports, ["0000:20:01.1", "0000:21:00.0", "0000:22:02.0"].
	Bridges []string
}

// String returns the path as sysfs spells it below devices/.
func (p Topology) String() string {
	if p.Root == "" {
		return ""
	}
	return strings.Join(append([]string{p.Root}, p.Bridges...), "/")
}

// Affinity says how close two functions are in the PCIe hierarchy: 0 when
// their root complexes differ or either is unknown, 1 when they share only
// the root complex, and 1+n when they also share the first n bridges (n >= 1
// means the same root port, hence the same PCIe switch). Larger is closer;
// it is symmetric.
func (p Topology) Affinity(q Topology) int {
	if p.Root == "" || p.Root != q.Root {
		return 0
	}
	n := 0
	for n < len(p.Bridges) && n < len(q.Bridges) && p.Bridges[n] == q.Bridges[n] {
		n++
	}
	return 1 + n
}

// Where the PCI functions are, relative to the sysfs root.
const (
	// BusPCIDevices holds one link per PCI function, named by its address,
	// to its directory below devices/.
	BusPCIDevices = "bus/pci/devices"
	sysDevices    = "devices"
)

// Tree finds the PCI functions of a sysfs tree and their topology. It
// prefers the bus/pci/devices links, and walks devices/pci*/ only where
// those cannot be read (a tree without links, or a file system that cannot
// read them): once, lazily. A Tree caches that walk and is for one
// goroutine.
type Tree struct {
	fsys fs.FS
	// walked maps a PCI address to its directory below devices/; nil
	// until walk has run.
	walked  map[string]string
	walkErr error
}

// NewTree returns a Tree on the sysfs tree fsys.
func NewTree(fsys fs.FS) *Tree { return &Tree{fsys: fsys} }

// List returns the addresses of the tree's PCI functions, in no particular
// order: the names in bus/pci/devices, or, where that directory does not
// exist, the functions found below devices/. An entry of bus/pci/devices
// that is not a canonical PCI address is a problem, an *AttrError; err is
// an *AttrError when neither place can be read.
func (t *Tree) List() (addrs []string, problems []error, err error) {
	entries, err := fs.ReadDir(t.fsys, BusPCIDevices)
	if err == nil {
		for _, e := range entries {
			a, perr := ParseAddress(e.Name())
			if perr != nil || a != e.Name() {
				problems = append(problems, &AttrError{FS: SysFS, Path: BusPCIDevices + "/" + e.Name(),
					Err: Invalid(e.Name(), "not a PCI function")})
				continue
			}
			addrs = append(addrs, a)
		}
		return addrs, problems, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, NewAttrError(SysFS, BusPCIDevices, err)
	}
	if err := t.walk(); err != nil {
		return nil, nil, err
	}
	addrs = make([]string, 0, len(t.walked))
	for a := range t.walked {
		addrs = append(addrs, a)
	}
	return addrs, nil, nil
}

// Dir returns the directory to read addr's attributes from without walking
// the tree: bus/pci/devices/<addr>, or, when that does not exist and [List]
// walked devices/, the function's directory there.
func (t *Tree) Dir(addr string) string {
	dir := BusPCIDevices + "/" + addr
	if p, ok := t.walked[addr]; ok {
		if _, err := fs.Stat(t.fsys, dir); err != nil {
			return p
		}
	}
	return dir
}

// Locate returns the directory to read addr's attributes from and its
// topology. The directory is bus/pci/devices/<addr> where that exists, and
// the topology comes from that link's target; where the link cannot be
// read, both come from the function's directory below devices/. A link
// that points at another function, or a path that is not a PCI device
// path, is an *AttrError; dir is still returned when it exists.
func (t *Tree) Locate(addr string) (dir string, topo Topology, err error) {
	link := BusPCIDevices + "/" + addr
	target, lerr := fs.ReadLink(t.fsys, link)
	if lerr == nil {
		a, topo, err := ParseDevicePath(target)
		if err != nil {
			return link, Topology{}, &AttrError{FS: SysFS, Path: link, Err: err}
		}
		if a != addr {
			return link, Topology{}, &AttrError{FS: SysFS, Path: link,
				Err: Invalid(target, "link points at another PCI function")}
		}
		return link, topo, nil
	}
	p, werr := t.find(addr)
	if werr != nil {
		if _, serr := fs.Stat(t.fsys, link); serr == nil {
			return link, Topology{}, werr
		}
		return "", Topology{}, werr
	}
	_, topo, err = ParseDevicePath(p)
	if err != nil {
		return p, Topology{}, &AttrError{FS: SysFS, Path: p, Err: err}
	}
	if _, serr := fs.Stat(t.fsys, link); serr == nil {
		return link, topo, nil
	}
	return p, topo, nil
}

// find returns the directory of addr below devices/.
func (t *Tree) find(addr string) (string, error) {
	if err := t.walk(); err != nil {
		return "", err
	}
	p, ok := t.walked[addr]
	if !ok {
		return "", &AttrError{FS: SysFS, Path: sysDevices, Err: fmt.Errorf("PCI function %s: %w", addr, fs.ErrNotExist)}
	}
	return p, nil
}

// walk maps every PCI function below devices/pci*/ to its directory, once.
// It descends only into directories named like PCI functions or host
// bridges, never follows links, and stops MaxTopologyDepth levels down.
func (t *Tree) walk() error {
	if t.walked != nil || t.walkErr != nil {
		return t.walkErr
	}
	entries, err := fs.ReadDir(t.fsys, sysDevices)
	if err != nil {
		t.walkErr = NewAttrError(SysFS, sysDevices, err)
		return t.walkErr
	}
	found := make(map[string]string)
	var visit func(dir string, depth int)
	visit = func(dir string, depth int) {
		if depth > MaxTopologyDepth {
			return
		}
		children, err := fs.ReadDir(t.fsys, dir)
		if err != nil {
			return
		}
		for _, c := range children {
			if !c.IsDir() {
				continue
			}
			p := dir + "/" + c.Name()
			if a, err := ParseAddress(c.Name()); err == nil && a == c.Name() {
				if _, dup := found[a]; !dup {
					found[a] = p
				}
				visit(p, depth+1)
			} else if _, err := ParseRootComplex(c.Name()); err == nil {
				visit(p, depth+1)
			}
		}
	}
	for _, e := range entries {
		if _, err := ParseRootComplex(e.Name()); err == nil && e.IsDir() {
			visit(path.Join(sysDevices, e.Name()), 1)
		}
	}
	t.walked = found
	return nil
}

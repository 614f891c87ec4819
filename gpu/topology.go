package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// PCIPath is a device's place in the PCIe hierarchy.
type PCIPath struct {
	// Root is the sysfs name of the PCIe root complex (host bridge),
	// "pci0000:20"; empty when unknown.
	Root string
	// Bridges are the PCI bridge functions from the root complex down to
	// the device, the device itself excluded: the root port first, then any
	// switch ports, ["0000:20:01.1", "0000:21:00.0", "0000:22:02.0"].
	Bridges []string
}

// String returns the path as sysfs spells it below devices/.
func (p PCIPath) String() string {
	if p.Root == "" {
		return ""
	}
	return strings.Join(append([]string{p.Root}, p.Bridges...), "/")
}

// Affinity says how close two devices are in the PCIe hierarchy: 0 when
// their root complexes differ or either is unknown, 1 when they share only
// the root complex, and 1+n when they also share the first n bridges (n >= 1
// means the same root port, hence the same PCIe switch). Larger is closer;
// it is symmetric.
func (p PCIPath) Affinity(q PCIPath) int {
	if p.Root == "" || p.Root != q.Root {
		return 0
	}
	n := 0
	for n < len(p.Bridges) && n < len(q.Bridges) && p.Bridges[n] == q.Bridges[n] {
		n++
	}
	return 1 + n
}

// Sysfs locations of PCI functions, relative to the sysfs root.
const (
	busPCIDevices = "bus/pci/devices"
	sysDevices    = "devices"
)

// pciTree finds PCI functions and their topology in a sysfs tree. It
// prefers the bus/pci/devices links and walks devices/pci*/ only where
// those cannot be read (a tree without links, or a file system that cannot
// read them), once, lazily.
type pciTree struct {
	fsys fs.FS
	// walked maps a PCI address to its directory below devices/; nil until
	// walk has run.
	walked  map[string]string
	walkErr error
}

// locate returns the directory to read a function's attributes from and its
// topology. The directory is bus/pci/devices/<addr> where that exists.
func (t *pciTree) locate(addr string) (dir string, topo PCIPath, err error) {
	link := busPCIDevices + "/" + addr
	target, lerr := fs.ReadLink(t.fsys, link)
	if lerr == nil {
		a, topo, err := parseTopology(target)
		if err != nil {
			return link, PCIPath{}, &AttrError{FS: fsSys, Path: link, Err: err}
		}
		if a != addr {
			return link, PCIPath{}, &AttrError{FS: fsSys, Path: link,
				Err: invalid(target, "link points at another PCI function")}
		}
		return link, topo, nil
	}
	// Not a link, or links cannot be read here: find the function below
	// devices/, where its directory's path is its topology.
	p, werr := t.find(addr)
	if werr != nil {
		if _, serr := fs.Stat(t.fsys, link); serr == nil {
			return link, PCIPath{}, werr
		}
		return "", PCIPath{}, werr
	}
	_, topo, err = parseTopology(p)
	if err != nil {
		return p, PCIPath{}, &AttrError{FS: fsSys, Path: p, Err: err}
	}
	if _, serr := fs.Stat(t.fsys, link); serr == nil {
		return link, topo, nil
	}
	return p, topo, nil
}

// find returns the directory of addr below devices/.
func (t *pciTree) find(addr string) (string, error) {
	if t.walked == nil && t.walkErr == nil {
		t.walked, t.walkErr = walkPCI(t.fsys)
	}
	if t.walkErr != nil {
		return "", t.walkErr
	}
	p, ok := t.walked[addr]
	if !ok {
		return "", &AttrError{FS: fsSys, Path: sysDevices, Err: fmt.Errorf("PCI function %s: %w", addr, fs.ErrNotExist)}
	}
	return p, nil
}

// walkPCI maps every PCI function below devices/pci*/ to its directory. It
// descends only into directories named like PCI functions or host bridges,
// never follows links, and stops maxTopologyDepth levels down.
func walkPCI(fsys fs.FS) (map[string]string, error) {
	entries, err := fs.ReadDir(fsys, sysDevices)
	if err != nil {
		return nil, attrErr(fsSys, sysDevices, err)
	}
	found := make(map[string]string)
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > maxTopologyDepth {
			return
		}
		children, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return
		}
		for _, c := range children {
			if !c.IsDir() {
				continue
			}
			p := dir + "/" + c.Name()
			if a, err := parsePCIAddress(c.Name()); err == nil && a == c.Name() {
				if _, dup := found[a]; !dup {
					found[a] = p
				}
				walk(p, depth+1)
			} else if _, err := parseRootComplex(c.Name()); err == nil {
				walk(p, depth+1)
			}
		}
	}
	for _, e := range entries {
		if _, err := parseRootComplex(e.Name()); err == nil && e.IsDir() {
			walk(path.Join(sysDevices, e.Name()), 1)
		}
	}
	return found, nil
}

// listPCI returns the PCI functions of the tree: the names in
// bus/pci/devices, or, where that directory does not exist, the functions
// found below devices/.
func (t *pciTree) listPCI() ([]string, []error, error) {
	entries, err := fs.ReadDir(t.fsys, busPCIDevices)
	if err == nil {
		var addrs []string
		var problems []error
		for _, e := range entries {
			a, perr := parsePCIAddress(e.Name())
			if perr != nil || a != e.Name() {
				problems = append(problems, &AttrError{FS: fsSys, Path: busPCIDevices + "/" + e.Name(),
					Err: invalid(e.Name(), "not a PCI function")})
				continue
			}
			addrs = append(addrs, a)
		}
		return addrs, problems, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, attrErr(fsSys, busPCIDevices, err)
	}
	if t.walked == nil && t.walkErr == nil {
		t.walked, t.walkErr = walkPCI(t.fsys)
	}
	if t.walkErr != nil {
		return nil, nil, t.walkErr
	}
	addrs := make([]string, 0, len(t.walked))
	for a := range t.walked {
		addrs = append(addrs, a)
	}
	return addrs, nil, nil
}

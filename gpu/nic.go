package gpu

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// NIC is a Slingshot NIC as carving sees it.
type NIC struct {
	// Name is the CXI device, "cxi0".
	Name string
	// PCIAddress is the PCI function, "0000:21:00.0".
	PCIAddress string
	// NUMANode is the PCI device's NUMA node; -1 when unknown.
	NUMANode int
	// Topology is the NIC's place in the PCIe hierarchy; its Root is empty
	// when unknown, which leaves only the NUMA node to place it by.
	Topology PCIPath
}

// NICsFromCXI turns the NICs of a [sysfs.Discover] run on the same sysfs
// tree into carving's NICs, adding each one's PCIe topology (from the
// bus/pci/devices link of its PCI address, else its directory below
// devices/). A NIC whose topology cannot be read is still returned, placed
// by its NUMA node alone, and an *AttrError says why; a NIC without a PCI
// address is left out with an error. The order of nics is kept.
func NICsFromCXI(fsys fs.FS, nics []sysfs.NIC) ([]NIC, []error) {
	if fsys == nil {
		return nil, []error{errors.New("nic topology: nil sysfs")}
	}
	tree := pcisysfs.NewTree(fsys)
	out := make([]NIC, 0, len(nics))
	var errs []error
	for _, n := range nics {
		if n.PCIAddress == "" {
			errs = append(errs, fmt.Errorf("nic %s: no PCI address: left out", n.Name))
			continue
		}
		nic := NIC{Name: n.Name, PCIAddress: n.PCIAddress, NUMANode: n.NUMANode}
		if _, topo, err := tree.Locate(n.PCIAddress); err != nil {
			errs = append(errs, fmt.Errorf("nic %s: %w", n.Name, err))
		} else {
			nic.Topology = topo
		}
		out = append(out, nic)
	}
	return out, errs
}

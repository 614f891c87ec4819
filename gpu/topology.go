package gpu

import "github.com/slingshot-k8s/slingshot/internal/pcisysfs"

// PCIPath is a device's place in the PCIe hierarchy: its root complex and
// the bridges above it. Its Affinity says how close two devices are.
// Discovery and carving read it through internal/pcisysfs, the PCI reader
// this package shares with cxi/sysfs.
type PCIPath = pcisysfs.Topology

// Package gpu discovers a node's NVIDIA and AMD GPUs and carves them into
// units of a GPU machine type, each topology-aligned with the node's
// Slingshot NICs, for the agent to advertise as a device-plugin resource
// ("hpe.com/compute-xlarge").
//
// The pieces, in the order the agent uses them:
//
//   - [Discover] reads the GPUs from sysfs (and NVIDIA's per-GPU
//     information from procfs): PCI address and IDs, NUMA node, PCIe
//     topology ([PCIPath]: root complex and bridges, for locality finer
//     than NUMA), product name, UUID, index and device nodes. A broken GPU
//     is returned with its Problems ([*AttrError]s naming the file) and
//     never hides its siblings.
//   - [NICsFromCXI] adds the PCIe topology to the NICs that cxi/sysfs
//     discovered.
//   - [ForNode] looks the node up in the configuration's node pool: its
//     machine type, its mode, the resource name. A node that is not listed
//     gets [ErrNotInNodePool] and advertises nothing.
//   - [Carve] (or [CarveFor]) makes the units: GPUs of one NUMA node,
//     packed below one PCIe switch or root complex where the count allows,
//     plus the nearest NICs of the same NUMA node. GPUs that do not match
//     or do not fit are [Excluded] with a sentence the agent can log. Units
//     are healthy only in the ready mode.
//   - [Carving.Payload] is what Allocate returns for some units: device
//     nodes or CDI device names, the runtimes' GPU selection variables and
//     the units' NIC names.
//   - [Carving.Usage] counts units in the Imperator design's shape.
//
// Unit IDs derive from the hardware (first GPU's PCI address, GPU count,
// hash of all members' addresses), so the same hardware gives the same IDs
// after a restart, and a different grouping never reuses an ID.
//
// Nothing here logs, keeps global state or starts goroutines; all functions
// are safe for concurrent use, and a [Carving] is read-only after [Carve].
// The PCI attributes and the PCIe topology are read by internal/pcisysfs,
// the reader cxi/sysfs shares; the GPU files' parsers here are pure and
// fuzzed. Tests run on trees that internal/mocksysfs and the package's own
// builders write; no real GPU node has been read by this code.
package gpu

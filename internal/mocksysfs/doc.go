// Package mocksysfs writes a realistic mock of the sysfs, procfs and /dev
// trees of a node with HPE Slingshot (CXI) NICs and GPUs, for tests and for
// development without hardware.
//
// [Write] lays out, under one directory:
//
//	sys/   the sysfs root: devices/pci<DDDD:BB>/... PCI functions with the
//	       cxi_ss1 driver's attributes (properties/, uc/, fru/), the class
//	       devices cxi/cxiN, cxi_user/cxiN and net/hsnN below each NIC's PCI
//	       function, relative class links in class/{cxi,cxi_user,net,drm},
//	       bus/pci/{devices,drivers}, devices/system/node and module/cxi_ss1.
//	proc/  driver/nvidia/gpus/<bdf>/information for each NVIDIA GPU.
//	dev/   empty placeholder files for the device nodes: cxiN, nvidiaN,
//	       nvidiactl, nvidia-uvm, kfd, dri/renderD<N>.
//
// So an agent under test takes --sysfs-root DIR/sys and --dev-root DIR/dev,
// and GPU discovery takes DIR/proc as its procfs root.
//
// Topology: NICs and GPUs are spread evenly over the NUMA nodes in index
// order. Each NUMA node gets as many PCIe root complexes as it has NICs or
// GPUs (whichever is more); the r-th root complex of a node, pci<DDDD:BB>,
// holds the node's r-th NIC behind bridge DDDD:BB:01.0 on bus BB+1 and its
// r-th GPU behind bridge DDDD:BB:01.1 on bus BB+2, so the NIC nearest a GPU
// is the one that shares its root complex. Root complexes are 0x20 buses
// apart, eight to a PCI domain. cxiN follow PCI order (physical functions
// first, then VFs); the hsnN names are shuffled with the seed and never in
// cxiN order, so consumers must match netdevs by PCI address.
//
// Attribute names and formats follow the driver (ss1/cass_sysfs.c,
// ss1/cass_uc.c) and the kernel's PCI and net class attributes. Values that
// the driver derives are derived the same way (pid_count, pid_granule, the
// NID from the low 20 bits of the locally administered MAC). Values no
// public source fixes (subsystem IDs, firmware and FRU strings, GPU UUIDs)
// are illustrative.
//
// Each NIC function has the PCI resource file, with BAR 0 of 2 GiB on a PF
// and 512 MiB on a VF: Cassini-1 VFs keep the PF's device ID, and the driver
// (ss1/cass_core.c) tells them apart by that size alone. VFs have no uc/,
// fru/ or netdev, and a physfn link; PFs have sriov_numvfs and virtfnN links.
//
// Every NIC's device/properties/num_* hold the driver's resource maxima
// ([DefaultMaxima]) unless [Spec.Maxima] gives that NIC its own, so a test
// can make a NIC whose limits are lower.
//
// [Spec.Faults] injects faults: a link down, a retry handler that is not
// running, a missing file or a garbage value. [SetLink] and
// [SetRetryHandler] change an existing tree atomically for health tests.
//
// This package is test and development tooling; nothing in the agent
// imports it.
package mocksysfs

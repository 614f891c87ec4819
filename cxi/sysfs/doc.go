// Package sysfs discovers HPE Slingshot (CXI) NICs from a sysfs tree.
//
// [Discover] walks class/cxi/cxiN and class/cxi_user/cxiN under an [fs.FS]
// rooted at the sysfs root (os.DirFS("/sys") on a node, an on-disk mock tree
// or an [testing/fstest.MapFS] in tests). For each device it reads the PCI
// address from the class device's "device" link, the PCI vendor and device
// IDs, the NUMA node, the bound driver, the driver's device/properties/
// attributes, the firmware version from device/uc/app_version and the FRU
// description from device/fru/description. The Ethernet netdev (hsnN) is
// found by matching the basename of class/net/*/device against the NIC's PCI
// address, never by index, as cxi_stat and libfabric do.
//
// A Cassini-2 VF has its own PCI device ID; a Cassini-1 VF has the PF's, and
// is told apart, as the driver's probe does, by its BAR 0 in the PCI
// resource file: smaller than [PFBAR0Size] (2 GiB) is a VF.
//
// Bad trees do not stop discovery: a missing, unreadable or garbled attribute
// becomes an [*AttrError] that names the file, is recorded in [NIC.Problems],
// and marks that NIC unhealthy; its siblings are discovered as usual.
//
// [ReadLinkState] is the cheap re-read a health poller calls: it reads only
// the values that change at run time (link, speed, pct_eq and the netdev's
// operstate).
//
// The PCI attributes (the address, vendor and device IDs, numa_node, the
// driver, the resource file) are read by internal/pcisysfs, the one PCI
// reader this package shares with gpu. The driver's own attributes are
// parsed here (parseHex32, parseDecimal, parseMAC, ...): pure functions of
// the attribute text that never panic, each with a fuzz target.
// Nothing in this package logs, keeps state or starts goroutines, so every
// function is safe to call concurrently on a file system that is safe for
// concurrent reads.
package sysfs

package sysfs

import (
	"errors"
	"net"
)

// Generation is the Cassini ASIC generation of a NIC.
type Generation int

const (
	// GenerationUnknown is the zero value: the PCI IDs were not read or
	// are not a Cassini's.
	GenerationUnknown Generation = iota
	// Cassini1 is the 200 Gb/s Cassini-1 (Cray vendor ID).
	Cassini1
	// Cassini2 is the Cassini-2 (HPE vendor ID), which also has VFs.
	Cassini2
)

func (g Generation) String() string {
	switch g {
	case Cassini1:
		return "cassini1"
	case Cassini2:
		return "cassini2"
	}
	return "unknown"
}

// PCI vendor and device IDs of Cassini NICs (ss1/cass_core.h).
const (
	VendorCray       uint16 = 0x17db
	VendorHPE        uint16 = 0x1590
	DeviceCassini1   uint16 = 0x0501
	DeviceCassini2PF uint16 = 0x0371
	DeviceCassini2VF uint16 = 0x0372
)

// PFBAR0Size is the smallest BAR 0 of a physical function, the driver's
// MMIO_BAR_LEN_PF (ss1/cass_core.h): a PF's BAR 0 is 2 GiB, a VF's 512 MiB.
// Cassini-1 PFs and VFs share one PCI device ID, so the driver's probe
// (ss1/cass_core.c) calls a Cassini-1 function whose BAR 0 is smaller a VF,
// and libcxi (src/devinfo.c) does the same for every NIC.
const PFBAR0Size = 2 << 30

// Identify returns the generation of the NIC with the given PCI IDs and
// whether it is an SR-IOV virtual function; ok is false when the IDs are not
// a Cassini's. Cassini-1 VFs carry the PF's IDs, so for Cassini-1 vf is
// always false: only the size of BAR 0 tells (see [PFBAR0Size]), which
// [Discover] reads.
func Identify(vendor, device uint16) (gen Generation, vf bool, ok bool) {
	switch {
	case vendor == VendorCray && device == DeviceCassini1:
		return Cassini1, false, true
	case vendor == VendorHPE && device == DeviceCassini2PF:
		return Cassini2, false, true
	case vendor == VendorHPE && device == DeviceCassini2VF:
		return Cassini2, true, true
	}
	return GenerationUnknown, false, false
}

// ResourceMaxima are the device-wide maxima of each CXI resource, from the
// num_* properties (the driver's default_rsrc_limits: 2048 PTEs, 1024 TXQs,
// 512 TGQs, 2047 EQs, 2047 CTs, 1022 ACs, 2048 TLEs, 16384 LEs).
type ResourceMaxima struct {
	PTEs, TXQs, TGQs, EQs, CTs, ACs, TLEs, LEs int
}

// Properties are the values of the driver's device/properties/ directory.
type Properties struct {
	// NID is the 20-bit fabric node ID; 0xffffffff until it is set.
	NID uint32
	// PIDBits, PIDCount and PIDGranule describe the endpoint space:
	// PIDCount = 2^PIDBits - 1, PIDGranule = 2^(17-PIDBits).
	PIDBits, PIDCount, PIDGranule int
	// Link reports whether the PHY is running.
	Link bool
	// SpeedMbps is the link speed in Mb/s (200000 at 200 Gb/s); 0 without
	// a port, -1 when unknown.
	SpeedMbps int
	// PCTEq is the retry handler's event queue; 0 means no retry handler
	// runs on this NIC.
	PCTEq uint32
	// CassiniVersion is "1.0", "1.1" or "2.0".
	CassiniVersion string
	// Max are the device's resource maxima.
	Max ResourceMaxima
	// RGIDsAvail is the number of free resource-group IDs (of 256);
	// -1 when the driver does not publish rgids_avail.
	RGIDsAvail int
}

// RetryHandlerRunning reports whether the retry handler (cxi_rh) runs on the
// NIC; libfabric's CXI provider skips a NIC where it does not.
func (p Properties) RetryHandlerRunning() bool { return p.PCTEq != 0 }

// NetDev is the Ethernet netdev (hsnN) that cxi_eth created on the same PCI
// function as a NIC.
type NetDev struct {
	// Name is the interface name, e.g. "hsn0".
	Name string
	// OperState is the RFC 2863 operational state ("up", "down", ...).
	OperState string
	// SpeedMbps is the speed in Mb/s; -1 when the kernel does not know it
	// (it refuses to report a speed while the link is down).
	SpeedMbps int
	// MAC is the interface's hardware address.
	MAC net.HardwareAddr
	// AddrAssignType says where the MAC came from; AddrAssignSet (3) for
	// the Slingshot algorithmic MAC.
	AddrAssignType int
}

// NIC is one CXI device as discovered from sysfs.
type NIC struct {
	// Name is the class device name, "cxi0"; the device node is /dev/<Name>.
	Name string
	// Index is N in cxiN.
	Index int
	// Path is the class device directory relative to the sysfs root,
	// "class/cxi/cxi0" (or "class/cxi_user/cxi0" when only the user class
	// lists it). ReadLinkState reads below it.
	Path string
	// PCIAddress is the PCI function, "0000:21:00.0".
	PCIAddress string
	// VendorID and DeviceID are the PCI IDs.
	VendorID, DeviceID uint16
	// Generation follows from the PCI IDs.
	Generation Generation
	// VF reports whether the NIC is an SR-IOV virtual function.
	VF bool
	// NUMANode is the PCI device's NUMA node; -1 when unknown.
	NUMANode int
	// Driver is the bound PCI driver, "cxi_ss1"; empty when not found.
	Driver string
	// Properties are the driver's device/properties/ values.
	Properties Properties
	// FirmwareVersion is device/uc/app_version; empty on VFs and when the
	// uC did not report one.
	FirmwareVersion string
	// FRUDescription is device/fru/description, e.g. "400Gb 2P NIC Mezz";
	// empty on VFs and when the FRU data is not programmed.
	FRUDescription string
	// NetDev is the hsn netdev on the same PCI function; nil when there is
	// none in this sysfs view (VFs, cxi_eth not loaded, or a network
	// namespace that does not hold it).
	NetDev *NetDev
	// Healthy reports whether the NIC's tree read cleanly (no Problems)
	// and its link is up.
	Healthy bool
	// Problems are the errors met while reading this NIC, each an
	// *AttrError naming the file.
	Problems []error
}

// Discovery is the result of [Discover].
type Discovery struct {
	// NICs are sorted by Index.
	NICs []NIC
	// Problems are errors that belong to no single NIC: a class entry
	// that is not named cxiN, an unreadable class/net, two netdevs on one
	// PCI function.
	Problems []error
}

// Err returns the problems of the discovery and of all its NICs joined with
// errors.Join, or nil when there are none.
func (d *Discovery) Err() error {
	errs := append([]error(nil), d.Problems...)
	for _, n := range d.NICs {
		errs = append(errs, n.Problems...)
	}
	return errors.Join(errs...)
}

package mocksysfs

// Truth is what [Write] wrote; tests compare discovery with it.
type Truth struct {
	// Dir is the directory given to Write; SysRoot, ProcRoot and DevRoot
	// are its sys, proc and dev subdirectories.
	Dir, SysRoot, ProcRoot, DevRoot string
	// NICs are all cxi devices, physical and virtual functions, by index.
	NICs []NIC
	// GPUs are in PCI order.
	GPUs []GPU
	// Files, Links and Dirs count what was written.
	Files, Links, Dirs int
}

// NIC is one written cxi device.
type NIC struct {
	// Name is "cxiN" and Index is N.
	Name  string
	Index int
	// PCIAddress is the function, "0000:21:00.0"; PhysFn is the PF's
	// address for a VF.
	PCIAddress, PhysFn string
	VendorID, DeviceID uint16
	VF                 bool
	// BAR0Size is the size of PCI BAR 0 in bytes, as the resource file
	// gives it: 2 GiB for a PF, 512 MiB for a VF (ss1/cass_core.h,
	// MMIO_BAR_LEN_PF).
	BAR0Size uint64
	NUMANode int
	// RootComplex is the sysfs name of the PCIe root complex,
	// "pci0000:20".
	RootComplex string
	// Driver is the PCI driver, "cxi_ss1".
	Driver string
	// ClassPath is the class device link, relative to SysRoot:
	// "class/cxi/cxi0". PCIPath is the PCI function directory, relative
	// to SysRoot.
	ClassPath, PCIPath string
	// DevNode is the device node, relative to DevRoot: "cxi0".
	DevNode    string
	Properties Properties
	// FirmwareVersion is uc/app_version and FRUDescription
	// fru/description; both empty for VFs, which lack those directories.
	FirmwareVersion, FRUDescription string
	// NetDev is the hsn netdev's name; empty for VFs.
	NetDev string
	// MAC, OperState, NetSpeedMbps and AddrAssignType are the netdev's.
	MAC            string
	OperState      string
	NetSpeedMbps   int
	AddrAssignType int
	// Faults are the faults injected on this NIC.
	Faults []Fault
}

// Properties are the values written to device/properties/.
type Properties struct {
	NID                           uint32
	PIDBits, PIDCount, PIDGranule int
	Link                          bool
	SpeedMbps                     int
	PCTEq                         uint32
	CassiniVersion                string
	PTEs, TXQs, TGQs, EQs, CTs    int
	ACs, TLEs, LEs                int
	RGIDsAvail                    int
}

// GPU is one written GPU.
type GPU struct {
	// BDF is the PCI address, "0000:22:00.0".
	BDF string
	// Model is the model key, ProductName its marketing name.
	Model, ProductName string
	Vendor             string
	VendorID, DeviceID uint16
	Class              uint32
	Driver             string
	NUMANode           int
	RootComplex        string
	// NearestNIC is the cxi device (physical function) on the same root
	// complex; empty when there is none.
	NearestNIC string
	// Minor is the NVIDIA device minor (nvidia<Minor>) or the AMD card
	// number (renderD<128+Minor>).
	Minor int
	// UUID is the NVIDIA GPU UUID; empty for AMD.
	UUID string
	// DevNodes are this GPU's own device nodes, relative to DevRoot:
	// "nvidia0", or "dri/renderD128". The shared nodes (nvidiactl,
	// nvidia-uvm, kfd) are in every GPU's SharedDevNodes.
	DevNodes, SharedDevNodes []string
}

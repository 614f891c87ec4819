package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"

	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// Vendor is a GPU maker, spelled as the machine type's gpu.type.
type Vendor string

// The vendors discovery knows.
const (
	NVIDIA Vendor = "nvidia"
	AMD    Vendor = "amd"
)

// PCI vendor IDs and the display-controller base class.
const (
	VendorIDNVIDIA uint16 = 0x10de
	VendorIDAMD    uint16 = 0x1002
	// ClassDisplay is the PCI base class of display controllers: VGA
	// (0x0300), 3D (0x0302) and other (0x0380) controllers.
	ClassDisplay = 0x03
)

// vendorOf returns the vendor of a PCI vendor ID, or "" for others.
func vendorOf(id uint16) Vendor {
	switch id {
	case VendorIDNVIDIA:
		return NVIDIA
	case VendorIDAMD:
		return AMD
	}
	return ""
}

// Device nodes shared by all GPUs of a vendor, relative to the dev root.
var (
	nvidiaSharedNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	amdSharedNodes    = []string{"kfd"}
)

// GPU is one GPU as discovered from sysfs and procfs.
type GPU struct {
	// PCIAddress is the PCI function, "0000:17:00.0".
	PCIAddress string
	Vendor     Vendor
	// VendorID, DeviceID and Class are the PCI IDs and class code.
	VendorID, DeviceID uint16
	Class              uint32
	// NUMANode is the PCI device's NUMA node; -1 when unknown.
	NUMANode int
	// Topology is the device's place in the PCIe hierarchy.
	Topology PCIPath
	// Product is the marketing name: NVIDIA's "Model:" line, AMD's
	// product_name attribute. Empty when it could not be read.
	Product string
	// UUID is NVIDIA's "GPU UUID:" value, or, for AMD, "GPU-" and the
	// 16 hex digits of the unique_id attribute (the form ROCm's
	// ROCR_VISIBLE_DEVICES takes). Empty when unknown.
	UUID string
	// Index is the GPU's position among this node's GPUs of the same
	// vendor in PCI address order, counting from 0. It is the index that
	// NVML (nvidia-smi, NVIDIA_VISIBLE_DEVICES, nvidia-ctk's CDI names)
	// and amd-ctk's CDI names use on a node where every GPU of the vendor
	// is bound to its driver; prefer UUIDs where that may not hold.
	Index int
	// Driver is the bound PCI driver ("nvidia", "amdgpu"); empty when none.
	Driver string
	// DevNodes are the GPU's own device nodes relative to the dev root:
	// "nvidia3" for NVIDIA (from "Device Minor:"), "dri/renderD130" for
	// AMD (from the device's drm/ children).
	DevNodes []string
	// SharedDevNodes are the vendor's nodes every container with any of
	// its GPUs needs: nvidiactl, nvidia-uvm, nvidia-uvm-tools; kfd.
	SharedDevNodes []string
	// Problems are the errors met while reading this GPU, each an
	// *AttrError naming the file. A GPU with problems is never carved.
	Problems []error
}

// Healthy reports whether the GPU's tree read cleanly.
func (g *GPU) Healthy() bool { return len(g.Problems) == 0 }

// Discovery is the result of [Discover].
type Discovery struct {
	// GPUs are sorted by PCI address.
	GPUs []GPU
	// Problems belong to no single GPU: a PCI function whose class or
	// vendor could not be read (it may be a GPU), a bad bus/pci/devices
	// entry.
	Problems []error
}

// Err returns the problems of the discovery and of all its GPUs joined, or
// nil when there are none.
func (d *Discovery) Err() error {
	errs := slices.Clone(d.Problems)
	for _, g := range d.GPUs {
		errs = append(errs, g.Problems...)
	}
	return errors.Join(errs...)
}

// NVIDIA's per-GPU information files, relative to the procfs root.
const nvidiaGPUsDir = "driver/nvidia/gpus"

// Discover finds the NVIDIA and AMD GPUs in the sysfs tree sysfs (rooted at
// /sys) and reads NVIDIA's per-GPU information from procfs (rooted at
// /proc; nil when there is none).
//
// A GPU is a PCI function of class 0x03xxxx whose vendor is NVIDIA (0x10de)
// or AMD (0x1002). The functions are listed from bus/pci/devices, or, where
// that directory is missing, found below devices/pci*/. For each GPU it
// reads the device ID, the NUMA node, the bound driver (from the driver
// link, else DRIVER= in its uevent), its place in the PCIe hierarchy (from
// the bus/pci/devices link, else from the directory path below devices/),
// all through internal/pcisysfs, and, by vendor:
//
//   - NVIDIA: driver/nvidia/gpus/<addr>/information in procfs: Model, GPU
//     UUID and Device Minor (the node /dev/nvidia<minor>).
//   - AMD: product_name, unique_id (optional), and the drm/renderD<N> child
//     (the node /dev/dri/renderD<N>).
//
// A GPU whose files are missing or garbled is still returned with its
// Problems, each an [*AttrError] naming the file; its siblings are
// unaffected. A missing numa_node, driver link or unique_id is not a
// problem. Discover returns an error only when sysfs is nil or no PCI
// function list can be read at all.
//
// Discover keeps no state, starts no goroutines and does not log; it is safe
// to call concurrently on file systems that are safe for concurrent reads.
func Discover(sysfs, procfs fs.FS) (*Discovery, error) {
	if sysfs == nil {
		return nil, errors.New("discover gpus: nil sysfs")
	}
	tree := pcisysfs.NewTree(sysfs)
	addrs, problems, err := tree.List()
	if err != nil {
		return nil, fmt.Errorf("discover gpus: %w", err)
	}
	slices.Sort(addrs)
	d := &Discovery{Problems: problems}
	for _, addr := range addrs {
		g, isGPU, perr := probe(sysfs, tree.Dir(addr), addr)
		if perr != nil {
			d.Problems = append(d.Problems, perr)
		}
		if !isGPU {
			continue
		}
		d.GPUs = append(d.GPUs, g)
	}
	counts := map[Vendor]int{}
	for i := range d.GPUs {
		g := &d.GPUs[i]
		g.Index = counts[g.Vendor]
		counts[g.Vendor]++
		readGPU(sysfs, tree, procfs, g)
	}
	return d, nil
}

// probe reads the class and vendor of the PCI function addr, whose
// directory is dir, and reports whether it is a GPU. An error means the
// function may be a GPU but could not be told; it is reported as a
// discovery problem.
func probe(fsys fs.FS, dir, addr string) (GPU, bool, error) {
	class, problems := pcisysfs.ReadFunction(fsys, dir, pcisysfs.AttrClass)
	if len(problems) > 0 {
		return GPU{}, false, problems[0]
	}
	if class.Class>>16 != ClassDisplay {
		return GPU{}, false, nil
	}
	ids, problems := pcisysfs.ReadFunction(fsys, dir, pcisysfs.AttrVendor)
	if len(problems) > 0 {
		return GPU{}, false, problems[0]
	}
	v := vendorOf(ids.VendorID)
	if v == "" {
		return GPU{}, false, nil
	}
	return GPU{PCIAddress: addr, Vendor: v, VendorID: ids.VendorID, Class: class.Class, NUMANode: -1}, true, nil
}

// readGPU fills in everything after the class and vendor; it records
// problems and never fails.
func readGPU(fsys fs.FS, tree *pcisysfs.Tree, procfs fs.FS, g *GPU) {
	dir, topo, err := tree.Locate(g.PCIAddress)
	if err != nil {
		g.Problems = append(g.Problems, err)
	}
	if dir == "" {
		return
	}
	g.Topology = topo
	// numa_node may be absent (-1), and so may the driver.
	fn, problems := pcisysfs.ReadFunction(fsys, dir, pcisysfs.AttrDevice|pcisysfs.AttrNUMANode|pcisysfs.AttrDriver)
	g.Problems = append(g.Problems, problems...)
	g.DeviceID, g.NUMANode, g.Driver = fn.DeviceID, fn.NUMANode, fn.Driver
	fail := func(err error) { g.Problems = append(g.Problems, err) }
	switch g.Vendor {
	case NVIDIA:
		readNVIDIA(procfs, g, fail)
	case AMD:
		readAMD(fsys, dir, g, fail)
	}
}

func readNVIDIA(procfs fs.FS, g *GPU, fail func(error)) {
	p := nvidiaGPUsDir + "/" + g.PCIAddress + "/information"
	if procfs == nil {
		fail(&AttrError{FS: fsProc, Path: p, Err: fmt.Errorf("no procfs given: %w", fs.ErrNotExist)})
		return
	}
	info, err := pcisysfs.Read(procfs, fsProc, p, parseNVIDIAInfo)
	if err != nil {
		fail(err)
		return
	}
	g.Product, g.UUID = info.Model, info.UUID
	g.DevNodes = []string{"nvidia" + strconv.Itoa(info.Minor)}
	g.SharedDevNodes = slices.Clone(nvidiaSharedNodes)
	switch {
	case info.BusLocation != "" && info.BusLocation != g.PCIAddress:
		fail(&AttrError{FS: fsProc, Path: p, Err: fmt.Errorf("%w: Bus Location %s is not the GPU's address",
			ErrInvalidValue, info.BusLocation)})
	case info.Excluded:
		fail(&AttrError{FS: fsProc, Path: p, Err: fmt.Errorf("%w: the driver excludes this GPU (GPU Excluded: Yes)",
			ErrInvalidValue)})
	}
}

func readAMD(fsys fs.FS, dir string, g *GPU, fail func(error)) {
	if v, err := pcisysfs.Read(fsys, fsSys, dir+"/product_name", parseText); err != nil {
		fail(err)
	} else {
		g.Product = v
	}
	if v, err := pcisysfs.Read(fsys, fsSys, dir+"/unique_id", parseAMDUniqueID); err == nil {
		g.UUID = v
	} else if !errors.Is(err, ErrMissing) {
		fail(err)
	}
	drm := dir + "/drm"
	entries, err := fs.ReadDir(fsys, drm)
	if err != nil {
		fail(attrErr(fsSys, drm, err))
		return
	}
	// ROCm computes through /dev/kfd and the render node; the card node
	// (modesetting, display) is not needed and not given.
	render := -1
	for _, e := range entries {
		kind, n, err := parseDRMName(e.Name())
		if err == nil && kind == drmRender {
			render = n
			break
		}
	}
	if render < 0 {
		fail(&AttrError{FS: fsSys, Path: drm + "/renderD*", Err: fmt.Errorf("no render node: %w", fs.ErrNotExist)})
		return
	}
	g.DevNodes = []string{"dri/renderD" + strconv.Itoa(render)}
	g.SharedDevNodes = slices.Clone(amdSharedNodes)
}

package mocksysfs

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Limits on a Spec; they keep every device addressable (256 cxi minors,
// eight root complexes to a PCI domain) and every run small.
const (
	MaxNICs      = 64
	MaxGPUs      = 64
	MaxNUMANodes = 64
	// MaxVFsPerNIC is the driver's C_NUM_VFS.
	MaxVFsPerNIC = 64
	// maxCXIDevices is the "ucxi" chrdev region's minor count.
	maxCXIDevices = 256
)

// NIC generations a Spec can ask for.
const (
	Cassini1 = "cassini1"
	Cassini2 = "cassini2"
)

// GPU vendors.
const (
	NVIDIA = "nvidia"
	AMD    = "amd"
)

// Spec says what to generate. The zero value is a node with one NUMA node,
// no NICs and no GPUs.
type Spec struct {
	// NICs is the number of NIC physical functions.
	NICs int
	// NUMANodes is the number of NUMA nodes; 0 means 1.
	NUMANodes int
	// GPUs is the number of GPUs.
	GPUs int
	// GPUVendor picks the default model when GPUModels is empty: NVIDIA
	// (the default) or AMD. When both are set, every model must be the
	// vendor's.
	GPUVendor string
	// GPUModels are GPU model keys (see [GPUModels]) assigned to the GPUs
	// in turn; several give a mixed node.
	GPUModels []string
	// Generation is Cassini2 (default) or Cassini1.
	Generation string
	// VFsPerNIC adds that many SR-IOV virtual functions to every
	// physical function; they become cxiN after all PFs. Cassini-2 VFs
	// have their own PCI device ID; Cassini-1 VFs share the PF's, and
	// only their 512 MiB BAR 0 tells them apart (see the resource file).
	VFsPerNIC int
	// Maxima override the resource maxima that device/properties/num_*
	// publish (ss1/cass_sysfs.c) for the NICs they name, by cxi index (PFs
	// and VFs), so that a test can make a NIC whose limits are below the
	// driver's defaults. Zero fields keep the default.
	Maxima map[int]ResourceMaxima
	// Faults are applied after the tree is written.
	Faults []Fault
	// Seed drives the hsn name shuffle, the NIDs and the GPU UUIDs; the
	// same Spec always writes the same tree.
	Seed int64
}

// ResourceMaxima are a NIC's device maxima of each CXI resource, the
// num_ptes, num_txqs, num_tgqs, num_eqs, num_cts, num_acs, num_tles and
// num_les properties. The driver's defaults (default_rsrc_limits) are
// 2048, 1024, 512, 2047, 2047, 1022, 2048 and 16384.
type ResourceMaxima struct {
	PTEs, TXQs, TGQs, EQs, CTs, ACs, TLEs, LEs int
}

// DefaultMaxima are the driver's default_rsrc_limits (cass_svc.c).
var DefaultMaxima = ResourceMaxima{PTEs: 2048, TXQs: 1024, TGQs: 512, EQs: 2047, CTs: 2047, ACs: 1022,
	TLEs: 2048, LEs: 16384}

// maxMaximum is the largest maximum a NIC can have: the service
// descriptor's limits are 16-bit.
const maxMaximum = 0xffff

// fields returns m's fields by name, for validation.
func (m *ResourceMaxima) fields() map[string]*int {
	return map[string]*int{"ptes": &m.PTEs, "txqs": &m.TXQs, "tgqs": &m.TGQs, "eqs": &m.EQs, "cts": &m.CTs,
		"acs": &m.ACs, "tles": &m.TLEs, "les": &m.LEs}
}

// or returns m with its zero fields taken from d.
func (m ResourceMaxima) or(d ResourceMaxima) ResourceMaxima {
	dst, def := m.fields(), d.fields()
	for name, v := range dst {
		if *v == 0 {
			*v = *def[name]
		}
	}
	return m
}

// FaultKind is a kind of injected fault.
type FaultKind int

const (
	// FaultLinkDown sets properties/link to 0 and the netdev down.
	FaultLinkDown FaultKind = iota + 1
	// FaultNoRetryHandler sets properties/pct_eq to 0.
	FaultNoRetryHandler
	// FaultMissingFile removes a file, link or directory.
	FaultMissingFile
	// FaultGarbage overwrites a file with a value no parser accepts, or
	// with Fault.Value.
	FaultGarbage
)

func (k FaultKind) String() string {
	switch k {
	case FaultLinkDown:
		return "link-down"
	case FaultNoRetryHandler:
		return "no-retry-handler"
	case FaultMissingFile:
		return "missing"
	case FaultGarbage:
		return "garbage"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// DefaultGarbage is what FaultGarbage writes when Fault.Value is empty:
// neither a number, nor valid text, nor a known keyword.
const DefaultGarbage = "\x01garbage\xff\n"

// Fault is one injected fault on the NIC cxi<NIC>.
//
// Path, for FaultMissingFile and FaultGarbage, is relative to the NIC's
// class device directory class/cxi/cxiN, so that "device/properties/nid" is
// the attribute that discovery names class/cxi/cxiN/device/properties/nid
// and "device" is the class device's link to its PCI function. A path
// starting "netdev/" is relative to the NIC's netdev instead:
// "netdev/operstate" is class/net/hsnM/operstate.
type Fault struct {
	Kind  FaultKind
	NIC   int
	Path  string
	Value string
}

// LinkDown is a fault that takes the link of cxi<nic> down.
func LinkDown(nic int) Fault { return Fault{Kind: FaultLinkDown, NIC: nic} }

// NoRetryHandler is a fault that leaves cxi<nic> without a retry handler.
func NoRetryHandler(nic int) Fault { return Fault{Kind: FaultNoRetryHandler, NIC: nic} }

// MissingFile is a fault that removes relpath of cxi<nic> (see [Fault]).
func MissingFile(nic int, relpath string) Fault {
	return Fault{Kind: FaultMissingFile, NIC: nic, Path: relpath}
}

// Garbage is a fault that overwrites relpath of cxi<nic> with
// [DefaultGarbage] (see [Fault]).
func Garbage(nic int, relpath string) Fault {
	return Fault{Kind: FaultGarbage, NIC: nic, Path: relpath}
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s:cxi%d", f.Kind, f.NIC)
	if f.Path != "" {
		s += ":" + f.Path
	}
	if f.Value != "" {
		s += fmt.Sprintf("=%q", f.Value)
	}
	return s
}

// ParseFault parses the command-line form of a fault:
//
//	link-down:cxiN
//	no-retry-handler:cxiN
//	missing:cxiN:RELPATH
//	garbage:cxiN:RELPATH[=VALUE]
func ParseFault(s string) (Fault, error) {
	kind, rest, _ := strings.Cut(s, ":")
	nicName, relpath, hasPath := strings.Cut(rest, ":")
	var f Fault
	switch kind {
	case "link-down":
		f.Kind = FaultLinkDown
	case "no-retry-handler":
		f.Kind = FaultNoRetryHandler
	case "missing":
		f.Kind = FaultMissingFile
	case "garbage":
		f.Kind = FaultGarbage
	default:
		return Fault{}, fmt.Errorf("fault %q: kind must be link-down, no-retry-handler, missing or garbage", s)
	}
	digits, ok := strings.CutPrefix(nicName, "cxi")
	n, err := parseIndex(digits)
	if !ok || err != nil {
		return Fault{}, fmt.Errorf("fault %q: want a NIC name cxiN after %q", s, kind+":")
	}
	f.NIC = n
	needPath := f.Kind == FaultMissingFile || f.Kind == FaultGarbage
	switch {
	case needPath && !hasPath:
		return Fault{}, fmt.Errorf("fault %q: want %s:cxiN:RELPATH", s, kind)
	case !needPath && hasPath:
		return Fault{}, fmt.Errorf("fault %q: %s takes no path", s, kind)
	}
	if f.Kind == FaultGarbage {
		relpath, f.Value, _ = strings.Cut(relpath, "=")
	}
	f.Path = relpath
	return f, nil
}

func parseIndex(s string) (int, error) {
	if s == "" || len(s) > 4 {
		return 0, errors.New("bad index")
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("bad index")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// GPUModel describes a GPU model the generator can write.
type GPUModel struct {
	// Key is the name used in Spec.GPUModels and --gpu-model.
	Key    string
	Vendor string
	// VendorID, DeviceID and Class are the PCI IDs and class code.
	VendorID, DeviceID uint16
	Class              uint32
	// SubsystemDevice is illustrative.
	SubsystemDevice uint16
	// ProductName is the marketing name (NVIDIA's "Model:" line, AMD's
	// product_name attribute).
	ProductName string
	// Driver is the PCI driver name.
	Driver string
}

// GPUModels lists the models the generator knows, by key.
var GPUModels = []GPUModel{
	{Key: "h100", Vendor: NVIDIA, VendorID: 0x10de, DeviceID: 0x2330, Class: 0x030200,
		SubsystemDevice: 0x16c1, ProductName: "NVIDIA H100 80GB HBM3", Driver: "nvidia"},
	{Key: "a100", Vendor: NVIDIA, VendorID: 0x10de, DeviceID: 0x20b2, Class: 0x030200,
		SubsystemDevice: 0x1463, ProductName: "NVIDIA A100-SXM4-80GB", Driver: "nvidia"},
	{Key: "mi250x", Vendor: AMD, VendorID: 0x1002, DeviceID: 0x740c, Class: 0x038000,
		SubsystemDevice: 0x0b0c, ProductName: "AMD Instinct MI250X", Driver: "amdgpu"},
	{Key: "mi210", Vendor: AMD, VendorID: 0x1002, DeviceID: 0x740f, Class: 0x038000,
		SubsystemDevice: 0x0c34, ProductName: "AMD Instinct MI210", Driver: "amdgpu"},
}

// defaultGPUModel is each vendor's default model key.
var defaultGPUModel = map[string]string{NVIDIA: "h100", AMD: "mi250x"}

// LookupGPUModel returns the model with the given key.
func LookupGPUModel(key string) (GPUModel, bool) {
	i := slices.IndexFunc(GPUModels, func(m GPUModel) bool { return m.Key == key })
	if i < 0 {
		return GPUModel{}, false
	}
	return GPUModels[i], true
}

func gpuModelKeys() string {
	keys := make([]string, len(GPUModels))
	for i, m := range GPUModels {
		keys[i] = m.Key
	}
	return strings.Join(keys, ", ")
}

// Validate returns the first reason the spec is invalid, or nil. Write
// validates too; Validate lets a caller check a spec before it writes.
func (s Spec) Validate() error {
	_, err := s.normalized()
	return err
}

// normalized returns s with defaults filled in, or the first reason it is
// invalid.
func (s Spec) normalized() (Spec, error) {
	if s.NUMANodes == 0 {
		s.NUMANodes = 1
	}
	if s.Generation == "" {
		s.Generation = Cassini2
	}
	switch {
	case s.NICs < 0 || s.NICs > MaxNICs:
		return s, fmt.Errorf("nics must be 0 to %d, not %d", MaxNICs, s.NICs)
	case s.GPUs < 0 || s.GPUs > MaxGPUs:
		return s, fmt.Errorf("gpus must be 0 to %d, not %d", MaxGPUs, s.GPUs)
	case s.NUMANodes < 1 || s.NUMANodes > MaxNUMANodes:
		return s, fmt.Errorf("numa-nodes must be 1 to %d, not %d", MaxNUMANodes, s.NUMANodes)
	case s.Generation != Cassini1 && s.Generation != Cassini2:
		return s, fmt.Errorf("generation must be %s or %s, not %q", Cassini1, Cassini2, s.Generation)
	case s.VFsPerNIC < 0 || s.VFsPerNIC > MaxVFsPerNIC:
		return s, fmt.Errorf("vfs-per-nic must be 0 to %d, not %d", MaxVFsPerNIC, s.VFsPerNIC)
	case s.NICs*(1+s.VFsPerNIC) > maxCXIDevices:
		return s, fmt.Errorf("%d NICs with %d VFs each make more than %d cxi devices",
			s.NICs, s.VFsPerNIC, maxCXIDevices)
	}
	if s.GPUVendor != "" && s.GPUVendor != NVIDIA && s.GPUVendor != AMD {
		return s, fmt.Errorf("gpu vendor must be %s or %s, not %q", NVIDIA, AMD, s.GPUVendor)
	}
	if len(s.GPUModels) == 0 {
		v := s.GPUVendor
		if v == "" {
			v = NVIDIA
		}
		s.GPUModels = []string{defaultGPUModel[v]}
	}
	for _, key := range s.GPUModels {
		m, ok := LookupGPUModel(key)
		if !ok {
			return s, fmt.Errorf("unknown gpu model %q (known: %s)", key, gpuModelKeys())
		}
		if s.GPUVendor != "" && m.Vendor != s.GPUVendor {
			return s, fmt.Errorf("gpu model %q is %s's, not %s's", key, m.Vendor, s.GPUVendor)
		}
	}
	devices := s.NICs * (1 + s.VFsPerNIC)
	for i, m := range s.Maxima {
		if i < 0 || i >= devices {
			return s, fmt.Errorf("maxima of cxi%d: no such NIC (cxi0 to cxi%d)", i, devices-1)
		}
		fields := m.fields()
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			if v := *fields[name]; v < 0 || v > maxMaximum {
				return s, fmt.Errorf("maxima of cxi%d: num_%s %d is not 0 to %d", i, name, v, maxMaximum)
			}
		}
	}
	for _, f := range s.Faults {
		if f.NIC < 0 || f.NIC >= devices {
			return s, fmt.Errorf("fault %s: no such NIC (cxi0 to cxi%d)", f, devices-1)
		}
		switch f.Kind {
		case FaultLinkDown, FaultNoRetryHandler:
			if f.Path != "" || f.Value != "" {
				return s, fmt.Errorf("fault %s: %s takes no path or value", f, f.Kind)
			}
		case FaultMissingFile, FaultGarbage:
			if f.Path == "" || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path ||
				f.Path == ".." || strings.HasPrefix(f.Path, "../") {
				return s, fmt.Errorf("fault %s: path must be a clean relative path inside the NIC's tree", f)
			}
			if f.Kind == FaultMissingFile && f.Value != "" {
				return s, fmt.Errorf("fault %s: missing takes no value", f)
			}
		default:
			return s, fmt.Errorf("fault %s: unknown kind", f)
		}
	}
	return s, nil
}

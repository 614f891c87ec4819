package mocksysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Values from the driver (see the reference notes, section 1).
const (
	driverName       = "cxi_ss1"
	pidBits          = 9                        // MAX_PID_BITS
	pidCount         = 1<<pidBits - 1           // 511
	pidGranule       = 1 << (17 - pidBits)      // 256
	hpcMTU           = 2112                     // C_MAX_HPC_MTU
	linkSpeedMbps    = 200000                   // 200 Gb/s
	rgidsAvail       = 256 - 2                  // C_NUM_RGIDS less the driver's and the default service's
	cxiUserMajor     = 508                      // dynamic chrdev major, illustrative
	drmMajor         = 226                      // DRM_MAJOR
	rootComplexesDom = 8                        // root complexes per PCI domain
	busStride        = 0x20                     // buses per root complex
	cpusPerNode      = 32                       // illustrative
	hsnMTU           = 9000                     // illustrative
	fwVersion        = "1.6.0.326"              // cxi_stat example in shs-docs
	qspiVersion      = "1.6.0.326-ESM-cd59c8e8" // illustrative
	driverRev        = "9ce667e"                // illustrative: a driver commit
)

// PCI BAR 0 of the NIC functions, which holds the CSRs (ss1/cass_core.h,
// MMIO_BAR 0). The driver's probe (ss1/cass_core.c) and libcxi
// (src/devinfo.c) call a function whose BAR 0 is smaller than
// MMIO_BAR_LEN_PF a VF; Cassini-1 has no other way to tell, its PF and VFs
// share one device ID.
const (
	pfBAR0Size = 2 << 30   // MMIO_BAR_LEN_PF
	vfBAR0Size = 512 << 20 // the VF's BAR 0 (cass_core.h comment)
	// Each PF gets a window of bus addresses: its BAR 0, then from the
	// middle its VFs' BAR 0s (the SR-IOV resource). Illustrative.
	barBase   = 0x200000000000
	barWindow = 64 << 30
	vfBARsAt  = 32 << 30
	// memBARFlags are a 64-bit prefetchable memory BAR's resource
	// flags: IORESOURCE_MEM_64|SIZEALIGN|PREFETCH|MEM and the BAR's
	// own type bits.
	memBARFlags = 0x14220c
	// pciResources is the number of lines in a PCI function's resource
	// file: 6 BARs, the ROM and 6 SR-IOV BARs (PCI_BRIDGE_RESOURCES).
	pciResources = 13
	iovResource  = 7 // PCI_IOV_RESOURCES: the VFs' BAR 0
)

// Write generates the tree described by spec under dir (sys/, proc/, dev/)
// and returns what it wrote. dir must not exist or be empty. It returns an
// error for an invalid spec, a fault whose path does not exist, or a failed
// write.
func Write(dir string, spec Spec) (*Truth, error) {
	spec, err := spec.normalized()
	if err != nil {
		return nil, fmt.Errorf("mock sysfs spec: %w", err)
	}
	if err := ensureEmptyDir(dir); err != nil {
		return nil, err
	}
	m := build(spec)
	m.truth.Dir = dir
	m.truth.SysRoot = filepath.Join(dir, "sys")
	m.truth.ProcRoot = filepath.Join(dir, "proc")
	m.truth.DevRoot = filepath.Join(dir, "dev")
	w := &writer{root: dir}
	m.write(w)
	if w.err != nil {
		return nil, w.err
	}
	for _, f := range spec.Faults {
		if err := m.applyFileFault(w, f); err != nil {
			return nil, err
		}
	}
	m.truth.Files, m.truth.Links, m.truth.Dirs = w.files, w.links, w.dirs
	return &m.truth, nil
}

func ensureEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create output directory: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read output directory: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("output directory %s is not empty", dir)
	}
	return nil
}

// model is the node to write: the truth plus what writing needs.
type model struct {
	spec  Spec
	truth Truth
	rcs   []rootComplex
	nics  []nicModel
	gpus  []gpuModel
}

type rootComplex struct {
	domain, bus, node int
	nic, gpu          int // index into model.nics / model.gpus, -1 for none
}

func (r rootComplex) name() string { return fmt.Sprintf("pci%04x:%02x", r.domain, r.bus) }
func (r rootComplex) bridge(fn int) string {
	return fmt.Sprintf("%04x:%02x:01.%d", r.domain, r.bus, fn)
}

type nicModel struct {
	t       *NIC
	ifindex int
	vfs     []int  // indexes of this PF's VFs in model.nics
	bar0    uint64 // bus address of BAR 0
}

type gpuModel struct {
	t     *GPU
	model GPUModel
	path  string // PCI function directory, relative to sys/
}

// spread returns the NUMA node of item i of n over k nodes: contiguous,
// even blocks.
func spread(i, n, k int) int { return i * k / n }

// build computes the whole node from spec; it writes nothing.
func build(spec Spec) *model {
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), 0x5eed51))
	m := &model{spec: spec}
	k := spec.NUMANodes

	nicsOn := make([][]int, k)
	for i := range spec.NICs {
		nicsOn[spread(i, spec.NICs, k)] = append(nicsOn[spread(i, spec.NICs, k)], i)
	}
	gpusOn := make([][]int, k)
	for j := range spec.GPUs {
		gpusOn[spread(j, spec.GPUs, k)] = append(gpusOn[spread(j, spec.GPUs, k)], j)
	}
	nicRC := make([]int, spec.NICs)
	gpuRC := make([]int, spec.GPUs)
	for node := range k {
		for r := range max(len(nicsOn[node]), len(gpusOn[node])) {
			n := len(m.rcs)
			rc := rootComplex{domain: n / rootComplexesDom, bus: n % rootComplexesDom * busStride, node: node, nic: -1, gpu: -1}
			if r < len(nicsOn[node]) {
				rc.nic = nicsOn[node][r]
				nicRC[rc.nic] = n
			}
			if r < len(gpusOn[node]) {
				rc.gpu = gpusOn[node][r]
				gpuRC[rc.gpu] = n
			}
			m.rcs = append(m.rcs, rc)
		}
	}
	if len(m.rcs) == 0 { // the management NIC needs a home
		m.rcs = append(m.rcs, rootComplex{nic: -1, gpu: -1})
	}

	// hsn names: a seeded shuffle that is never the identity, so nothing
	// can get away with pairing cxiN and hsnN by index.
	perm := rng.Perm(spec.NICs)
	if spec.NICs > 1 && slices.IsSorted(perm) {
		perm = append(perm[1:], perm[0])
	}
	nidBase := uint32(0x100 + rng.IntN(0x800)*0x10)

	c1 := spec.Generation == Cassini1
	total := spec.NICs * (1 + spec.VFsPerNIC)
	m.truth.NICs = make([]NIC, total)
	m.nics = make([]nicModel, total)
	for i := range spec.NICs {
		rc := m.rcs[nicRC[i]]
		bus := rc.bus + 1
		addr := fmt.Sprintf("%04x:%02x:00.0", rc.domain, bus)
		nid := nidBase + uint32(i)
		hsn := perm[i]
		t := &m.truth.NICs[i]
		*t = NIC{
			Name: fmt.Sprintf("cxi%d", i), Index: i, PCIAddress: addr,
			VendorID: 0x1590, DeviceID: 0x0371, NUMANode: rc.node,
			RootComplex: rc.name(), Driver: driverName,
			PCIPath:   path.Join("devices", rc.name(), rc.bridge(0), addr),
			ClassPath: fmt.Sprintf("class/cxi/cxi%d", i), DevNode: fmt.Sprintf("cxi%d", i),
			Properties:      nicProperties(nid, uint32(2+i), c1, spec.Maxima[i]),
			FirmwareVersion: fwVersion, FRUDescription: "400Gb 2P NIC Mezz",
			NetDev: fmt.Sprintf("hsn%d", hsn), MAC: macForNID(nid), OperState: "up",
			NetSpeedMbps: linkSpeedMbps, AddrAssignType: 3,
		}
		t.BAR0Size = pfBAR0Size
		if c1 {
			t.VendorID, t.DeviceID, t.FRUDescription = 0x17db, 0x0501, "200Gb 1P NIC Mezz"
		}
		bar0 := uint64(barBase + i*barWindow)
		m.nics[i] = nicModel{t: t, ifindex: 3 + hsn, bar0: bar0}
		for v := range spec.VFsPerNIC {
			vi := spec.NICs + i*spec.VFsPerNIC + v
			devfn := v + 1 // ARI: VFs take the functions after the PF
			vaddr := fmt.Sprintf("%04x:%02x:%02x.%d", rc.domain, bus, devfn>>3, devfn&7)
			vt := &m.truth.NICs[vi]
			*vt = NIC{
				Name: fmt.Sprintf("cxi%d", vi), Index: vi, PCIAddress: vaddr, PhysFn: addr,
				VendorID: 0x1590, DeviceID: 0x0372, VF: true, BAR0Size: vfBAR0Size, NUMANode: rc.node,
				RootComplex: rc.name(), Driver: driverName,
				PCIPath:   path.Join("devices", rc.name(), rc.bridge(0), vaddr),
				ClassPath: fmt.Sprintf("class/cxi/cxi%d", vi), DevNode: fmt.Sprintf("cxi%d", vi),
				Properties: nicProperties(nid, uint32(2+vi), c1, spec.Maxima[vi]),
			}
			if c1 { // Cassini-1 VFs keep the PF's device ID
				vt.VendorID, vt.DeviceID = t.VendorID, t.DeviceID
			}
			m.nics[vi] = nicModel{t: vt, bar0: bar0 + vfBARsAt + uint64(v)*vfBAR0Size}
			m.nics[i].vfs = append(m.nics[i].vfs, vi)
		}
	}

	m.truth.GPUs = make([]GPU, spec.GPUs)
	m.gpus = make([]gpuModel, spec.GPUs)
	nvMinor, amdCard := 0, 0
	for j := range spec.GPUs {
		gm, _ := LookupGPUModel(spec.GPUModels[j%len(spec.GPUModels)])
		rc := m.rcs[gpuRC[j]]
		bdf := fmt.Sprintf("%04x:%02x:00.0", rc.domain, rc.bus+2)
		t := &m.truth.GPUs[j]
		*t = GPU{
			BDF: bdf, Model: gm.Key, ProductName: gm.ProductName, Vendor: gm.Vendor,
			VendorID: gm.VendorID, DeviceID: gm.DeviceID, Class: gm.Class, Driver: gm.Driver,
			NUMANode: rc.node, RootComplex: rc.name(),
		}
		if rc.nic >= 0 {
			t.NearestNIC = m.truth.NICs[rc.nic].Name
		}
		switch gm.Vendor {
		case NVIDIA:
			t.Minor = nvMinor
			nvMinor++
			t.UUID = fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff,
				rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
			t.DevNodes = []string{fmt.Sprintf("nvidia%d", t.Minor)}
		case AMD:
			t.Minor = amdCard
			amdCard++
			t.DevNodes = []string{fmt.Sprintf("dri/renderD%d", 128+t.Minor)}
		}
		m.gpus[j] = gpuModel{t: t, model: gm, path: path.Join("devices", rc.name(), rc.bridge(1), bdf)}
	}
	for j := range m.truth.GPUs {
		t := &m.truth.GPUs[j]
		switch t.Vendor {
		case NVIDIA:
			t.SharedDevNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
		case AMD:
			t.SharedDevNodes = []string{"kfd"}
		}
	}

	for _, f := range spec.Faults {
		t := &m.truth.NICs[f.NIC]
		t.Faults = append(t.Faults, f)
		switch f.Kind {
		case FaultLinkDown:
			t.Properties.Link = false
			if t.NetDev != "" {
				t.OperState, t.NetSpeedMbps = "down", -1
			}
		case FaultNoRetryHandler:
			t.Properties.PCTEq = 0
		}
	}
	return m
}

// nicProperties are a NIC's device/properties/ values; maxima overrides the
// driver's default resource maxima where its fields are not zero.
func nicProperties(nid, pctEq uint32, cassini1 bool, maxima ResourceMaxima) Properties {
	m := maxima.or(DefaultMaxima)
	p := Properties{
		NID: nid, PIDBits: pidBits, PIDCount: pidCount, PIDGranule: pidGranule,
		Link: true, SpeedMbps: linkSpeedMbps, PCTEq: pctEq, CassiniVersion: "2.0",
		PTEs: m.PTEs, TXQs: m.TXQs, TGQs: m.TGQs, EQs: m.EQs, CTs: m.CTs, ACs: m.ACs,
		TLEs: m.TLEs, LEs: m.LEs, RGIDsAvail: rgidsAvail,
	}
	if cassini1 {
		p.CassiniVersion = "1.1"
	}
	return p
}

// macForNID is the Slingshot algorithmic MAC: locally administered, with
// the NID in its low 20 bits (the driver derives the NID back from it).
func macForNID(nid uint32) string {
	return fmt.Sprintf("02:00:00:%02x:%02x:%02x", byte(nid>>16), byte(nid>>8), byte(nid))
}

// write renders the model.
func (m *model) write(w *writer) {
	w.dir("proc")
	w.dir("dev")
	sys := "sys/"
	nodes := make([]string, m.spec.NUMANodes)
	for k := range nodes {
		nodes[k] = fmt.Sprintf("%d-%d", k*cpusPerNode, (k+1)*cpusPerNode-1)
		w.file(sys+fmt.Sprintf("devices/system/node/node%d/cpulist", k), nodes[k]+"\n")
	}
	w.file(sys+"devices/system/node/online", fmt.Sprintf("0-%d\n", m.spec.NUMANodes-1))
	w.file(sys+"devices/system/node/possible", fmt.Sprintf("0-%d\n", m.spec.NUMANodes-1))
	w.file(sys+"module/cxi_ss1/parameters/pid_bits", fmt.Sprintf("%d\n", pidBits))
	w.file(sys+"module/cxi_ss1/parameters/disable_default_svc", "Y\n")
	w.dir(sys + "class/cxi")
	w.dir(sys + "class/cxi_user")
	w.dir(sys + "bus/pci/drivers/" + driverName)

	for _, rc := range m.rcs {
		rcDir := sys + "devices/" + rc.name()
		w.file(rcDir+"/uevent", "")
		for fn, used := range []bool{rc.nic >= 0, rc.gpu >= 0} {
			if !used {
				continue
			}
			addr := rc.bridge(fn)
			pciFunction(w, rcDir+"/"+addr, pciIDs{vendor: 0x1022, device: 0x1483, subVendor: 0x1022,
				subDevice: 0x1453, class: 0x060400, addr: addr, driver: "pcieport", node: rc.node,
				cpus: nodes[rc.node]})
		}
	}

	// lo and a management NIC: netdevs that discovery must not match.
	w.file(sys+"devices/virtual/net/lo/address", "00:00:00:00:00:00\n")
	w.file(sys+"devices/virtual/net/lo/operstate", "unknown\n")
	w.file(sys+"devices/virtual/net/lo/ifindex", "1\n")
	w.link(sys+"class/net/lo", sys+"devices/virtual/net/lo")
	rc0 := m.rcs[0]
	mgmt := fmt.Sprintf("%04x:%02x:00.0", rc0.domain, rc0.bus+busStride-1)
	bridge := fmt.Sprintf("%04x:%02x:1c.0", rc0.domain, rc0.bus)
	mgmtDir := sys + "devices/" + rc0.name() + "/" + bridge + "/" + mgmt
	pciFunction(w, sys+"devices/"+rc0.name()+"/"+bridge, pciIDs{vendor: 0x8086, device: 0xa110,
		subVendor: 0x8086, subDevice: 0x7270, class: 0x060400, addr: bridge, driver: "pcieport",
		node: rc0.node, cpus: nodes[rc0.node]})
	pciFunction(w, mgmtDir, pciIDs{vendor: 0x8086, device: 0x1533, subVendor: 0x8086,
		subDevice: 0x0001, class: 0x020000, addr: mgmt, driver: "igb", node: rc0.node, cpus: nodes[rc0.node]})
	netdev(w, mgmtDir, "eno1", "b4:96:91:00:00:01", 0, "up", 1000, 2, 1500)

	for i := range m.nics {
		m.writeNIC(w, &m.nics[i], nodes)
	}
	shared := make(map[string]bool)
	for i := range m.gpus {
		m.writeGPU(w, &m.gpus[i], nodes)
		for _, n := range m.gpus[i].t.SharedDevNodes {
			if !shared[n] {
				shared[n] = true
				w.file("dev/"+n, "")
			}
		}
	}
}

func (m *model) writeNIC(w *writer, n *nicModel, nodes []string) {
	t := n.t
	sys := "sys/"
	dir := sys + t.PCIPath
	pciFunction(w, dir, pciIDs{vendor: t.VendorID, device: t.DeviceID, subVendor: t.VendorID,
		subDevice: t.DeviceID, class: 0x020000, addr: t.PCIAddress, driver: driverName,
		node: t.NUMANode, cpus: nodes[t.NUMANode]})
	w.file(dir+"/resource", resourceFile(n, t.VF))

	p := t.Properties
	props := [][2]string{
		{"nic_addr", fmt.Sprintf("0x%x", p.NID)},
		{"nid", fmt.Sprintf("0x%x", p.NID)},
		{"pid_bits", fmt.Sprint(p.PIDBits)},
		{"pid_count", fmt.Sprint(p.PIDCount)},
		{"pid_granule", fmt.Sprint(p.PIDGranule)},
		{"min_free_shift", "0"},
		{"rdzv_get_idx", fmt.Sprint(p.PIDGranule - 1)},
		{"hpc_mtu", fmt.Sprint(hpcMTU)},
		{"speed", fmt.Sprint(p.SpeedMbps)},
		{"link", boolDigit(p.Link)},
		{"rev", "2"},
		{"proto", "0"},
		{"platform", "0"},
		{"system_type_identifier", "0"},
		{"cassini_version", p.CassiniVersion},
		{"uc_nic", fmt.Sprint(t.Index % 2)},
		{"num_ptes", fmt.Sprint(p.PTEs)},
		{"num_txqs", fmt.Sprint(p.TXQs)},
		{"num_tgqs", fmt.Sprint(p.TGQs)},
		{"num_eqs", fmt.Sprint(p.EQs)},
		{"num_cts", fmt.Sprint(p.CTs)},
		{"num_acs", fmt.Sprint(p.ACs)},
		{"num_tles", fmt.Sprint(p.TLEs)},
		{"num_les", fmt.Sprint(p.LEs)},
		{"rgids_avail", fmt.Sprint(p.RGIDsAvail)},
		{"pct_eq", fmt.Sprint(p.PCTEq)},
		{"driver_rev", driverRev},
		{"current_esm_link_speed", "Disabled"},
		{"rdzv_get_en", "1"},
		{"pcie_corr_err", "0"},
		{"pcie_uncorr_err", "0"},
		{"amo_remap_to_pcie_fadd", "0"},
		{"ats_enabled", "0"},
	}
	for _, kv := range props {
		w.file(dir+"/properties/"+kv[0], kv[1]+"\n")
	}

	if t.VF {
		w.link(dir+"/physfn", sys+path.Join(path.Dir(t.PCIPath), t.PhysFn))
	} else {
		for _, kv := range [][2]string{
			{"app_version", t.FirmwareVersion}, {"bootloader_version", "1.6.0.12"},
			{"qspi_blob_version", qspiVersion}, {"oprom_version", "1.2.0"},
			{"csr1_version", "1.6.0"}, {"csr2_version", "1.6.0"}, {"srds_version", "0x2024"},
		} {
			w.file(dir+"/uc/"+kv[0], kv[1]+"\n")
		}
		w.file(dir+"/uc/reset", "")
		for _, kv := range [][2]string{
			{"description", t.FRUDescription}, {"model", "P43012-001"},
			{"part_number", "P43012-001"}, {"serial_number", fmt.Sprintf("HM%08d", 10000+t.Index)},
			{"manufacturer", "HPE"},
		} {
			w.file(dir+"/fru/"+kv[0], kv[1]+"\n")
		}
		for r := range 10 {
			w.file(fmt.Sprintf("%s/link_restarts/time_%d", dir, r), "0\n")
		}
		w.file(dir+"/settings/ac_filter_disabled", "0\n")
		w.file(dir+"/sriov_totalvfs", fmt.Sprintf("%d\n", MaxVFsPerNIC))
		w.file(dir+"/sriov_numvfs", fmt.Sprintf("%d\n", len(n.vfs)))
		for v, vi := range n.vfs {
			w.link(fmt.Sprintf("%s/virtfn%d", dir, v), sys+m.truth.NICs[vi].PCIPath)
		}
		speed := t.NetSpeedMbps
		netdev(w, dir, t.NetDev, t.MAC, t.AddrAssignType, t.OperState, speed, n.ifindex, hsnMTU)
	}

	// The class devices live below the PCI function; class/ links to them.
	for _, class := range []string{"cxi", "cxi_user"} {
		cdev := dir + "/" + class + "/" + t.Name
		w.link(cdev+"/device", dir)
		w.link(cdev+"/subsystem", sys+"class/"+class)
		if class == "cxi_user" {
			w.file(cdev+"/dev", fmt.Sprintf("%d:%d\n", cxiUserMajor, t.Index))
			w.file(cdev+"/uevent", fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\nDEVMODE=0666\n",
				cxiUserMajor, t.Index, t.Name))
		} else {
			w.file(cdev+"/uevent", "")
		}
		w.link(sys+"class/"+class+"/"+t.Name, cdev)
	}
	w.file("dev/"+t.DevNode, "")
}

func (m *model) writeGPU(w *writer, g *gpuModel, nodes []string) {
	t := g.t
	sys := "sys/"
	dir := sys + g.path
	pciFunction(w, dir, pciIDs{vendor: t.VendorID, device: t.DeviceID, subVendor: t.VendorID,
		subDevice: g.model.SubsystemDevice, class: t.Class, addr: t.BDF, driver: t.Driver,
		node: t.NUMANode, cpus: nodes[t.NUMANode]})
	switch t.Vendor {
	case NVIDIA:
		info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\n"+
			"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\n"+
			"Device Minor: \t %d\nGPU Firmware: \t 550.90.07\nGPU Excluded:\t No\n",
			t.ProductName, 200+t.Minor, t.UUID, t.BDF, t.Minor)
		w.file("proc/driver/nvidia/gpus/"+t.BDF+"/information", info)
		for _, n := range t.DevNodes {
			w.file("dev/"+n, "")
		}
	case AMD:
		w.file(dir+"/product_name", t.ProductName+"\n")
		for _, drm := range []struct {
			name  string
			minor int
		}{{fmt.Sprintf("card%d", t.Minor), t.Minor}, {fmt.Sprintf("renderD%d", 128+t.Minor), 128 + t.Minor}} {
			cdev := dir + "/drm/" + drm.name
			w.file(cdev+"/dev", fmt.Sprintf("%d:%d\n", drmMajor, drm.minor))
			w.file(cdev+"/uevent", fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=dri/%s\n", drmMajor, drm.minor, drm.name))
			w.link(cdev+"/device", dir)
			w.link(sys+"class/drm/"+drm.name, cdev)
		}
		for _, n := range t.DevNodes {
			w.file("dev/"+n, "")
		}
	}
}

type pciIDs struct {
	vendor, device, subVendor, subDevice uint16
	class                                uint32
	addr, driver                         string
	node                                 int
	cpus                                 string
}

// pciFunction writes the standard attributes of a PCI function at dir and
// its bus/pci links.
func pciFunction(w *writer, dir string, id pciIDs) {
	w.file(dir+"/vendor", fmt.Sprintf("0x%04x\n", id.vendor))
	w.file(dir+"/device", fmt.Sprintf("0x%04x\n", id.device))
	w.file(dir+"/subsystem_vendor", fmt.Sprintf("0x%04x\n", id.subVendor))
	w.file(dir+"/subsystem_device", fmt.Sprintf("0x%04x\n", id.subDevice))
	w.file(dir+"/class", fmt.Sprintf("0x%06x\n", id.class))
	w.file(dir+"/numa_node", fmt.Sprintf("%d\n", id.node))
	w.file(dir+"/local_cpulist", id.cpus+"\n")
	w.file(dir+"/uevent", fmt.Sprintf("DRIVER=%s\nPCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\n"+
		"PCI_SLOT_NAME=%s\nMODALIAS=pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X\n",
		id.driver, id.class, id.vendor, id.device, id.subVendor, id.subDevice, id.addr,
		id.vendor, id.device, id.subVendor, id.subDevice, id.class>>16, id.class>>8&0xff, id.class&0xff))
	w.link(dir+"/driver", "sys/bus/pci/drivers/"+id.driver)
	w.link(dir+"/subsystem", "sys/bus/pci")
	w.link("sys/bus/pci/drivers/"+id.driver+"/"+id.addr, dir)
	w.link("sys/bus/pci/devices/"+id.addr, dir)
}

// resourceFile is a NIC function's PCI resource file, as the kernel's
// resource_show prints it: one "start end flags" line per resource, zeros
// for those not there. BAR 0 is the only BAR; a PF also has the SR-IOV
// resource that holds its VFs' BAR 0s. The bin files resource0... are not
// written: their size is the BAR's, 2 GiB files that tools copying a tree
// would read.
func resourceFile(n *nicModel, vf bool) string {
	var lines [pciResources][3]uint64
	lines[0] = [3]uint64{n.bar0, n.bar0 + n.t.BAR0Size - 1, memBARFlags}
	if !vf {
		iov := n.bar0 + vfBARsAt
		lines[iovResource] = [3]uint64{iov, iov + MaxVFsPerNIC*vfBAR0Size - 1, memBARFlags}
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "0x%016x 0x%016x 0x%016x\n", l[0], l[1], l[2])
	}
	return b.String()
}

// netdev writes net/<name> below the PCI function dir and its class link.
func netdev(w *writer, dir, name, mac string, assign int, oper string, speed, ifindex, mtu int) {
	nd := dir + "/net/" + name
	carrier := "1"
	if oper != "up" {
		carrier = "0"
	}
	for _, kv := range [][2]string{
		{"address", mac}, {"addr_assign_type", fmt.Sprint(assign)}, {"operstate", oper},
		{"speed", fmt.Sprint(speed)}, {"carrier", carrier}, {"mtu", fmt.Sprint(mtu)},
		{"ifindex", fmt.Sprint(ifindex)}, {"type", "1"}, {"broadcast", "ff:ff:ff:ff:ff:ff"},
		{"uevent", fmt.Sprintf("INTERFACE=%s\nIFINDEX=%d", name, ifindex)},
	} {
		w.file(nd+"/"+kv[0], kv[1]+"\n")
	}
	w.link(nd+"/device", dir)
	w.link(nd+"/subsystem", "sys/class/net")
	w.link("sys/class/net/"+name, nd)
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// applyFileFault removes or overwrites the file a fault names.
func (m *model) applyFileFault(w *writer, f Fault) error {
	if f.Kind != FaultMissingFile && f.Kind != FaultGarbage {
		return nil
	}
	t := m.truth.NICs[f.NIC]
	var p string
	switch rest, ok := strings.CutPrefix(f.Path, "netdev/"); {
	case ok && t.NetDev == "":
		return fmt.Errorf("fault %s: %s has no netdev", f, t.Name)
	case ok:
		p = path.Join("sys", path.Dir(t.PCIPath), t.PCIAddress, "net", t.NetDev, rest)
	case f.Path == "device" || strings.HasPrefix(f.Path, "device/"):
		// device/... is the PCI function's; "device" alone is the link.
		if f.Path == "device" {
			p = path.Join("sys", t.PCIPath, "cxi", t.Name, "device")
		} else {
			p = path.Join("sys", t.PCIPath, strings.TrimPrefix(f.Path, "device/"))
		}
	default:
		p = path.Join("sys", t.PCIPath, "cxi", t.Name, f.Path)
	}
	full := filepath.Join(w.root, filepath.FromSlash(p))
	if _, err := os.Lstat(full); err != nil {
		return fmt.Errorf("fault %s: %w", f, err)
	}
	if f.Kind == FaultMissingFile {
		if err := os.RemoveAll(full); err != nil {
			return fmt.Errorf("fault %s: %w", f, err)
		}
		return nil
	}
	v := f.Value
	if v == "" {
		v = DefaultGarbage
	}
	if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
		return fmt.Errorf("fault %s: %w", f, err)
	}
	return nil
}

// writer writes files and links below root and keeps the first error, so
// the tree code reads as a list of what it writes.
type writer struct {
	root               string
	files, links, dirs int
	made               map[string]bool
	err                error
}

func (w *writer) dir(rel string) {
	if w.err != nil || w.made[rel] {
		return
	}
	if w.made == nil {
		w.made = make(map[string]bool)
	}
	parent := path.Dir(rel)
	if parent != "." {
		w.dir(parent)
	}
	if err := os.Mkdir(filepath.Join(w.root, filepath.FromSlash(rel)), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		w.err = fmt.Errorf("mock sysfs: %w", err)
		return
	}
	w.made[rel] = true
	w.dirs++
}

func (w *writer) file(rel, content string) {
	w.dir(path.Dir(rel))
	if w.err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(w.root, filepath.FromSlash(rel)), []byte(content), 0o644); err != nil {
		w.err = fmt.Errorf("mock sysfs: %w", err)
		return
	}
	w.files++
}

// link makes rel a symbolic link to target (both relative to root) the way
// sysfs does: a relative path up to the target's parent, then down to it,
// so the link's basename is always the target's name (a device link to a
// PCI function ends in its address, as libcxi and cxi_stat expect).
func (w *writer) link(rel, target string) {
	w.dir(path.Dir(rel))
	if w.err != nil {
		return
	}
	up, err := filepath.Rel(filepath.FromSlash(path.Dir(rel)), filepath.FromSlash(path.Dir(target)))
	if err != nil {
		w.err = fmt.Errorf("mock sysfs: link %s: %w", rel, err)
		return
	}
	dest := filepath.ToSlash(filepath.Join(up, path.Base(target)))
	if err := os.Symlink(filepath.FromSlash(dest), filepath.Join(w.root, filepath.FromSlash(rel))); err != nil {
		w.err = fmt.Errorf("mock sysfs: %w", err)
		return
	}
	w.links++
}

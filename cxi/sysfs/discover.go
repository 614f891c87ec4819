package sysfs

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// Class directories, relative to the sysfs root.
const (
	classCXI     = "class/cxi"
	classCXIUser = "class/cxi_user"
	classNet     = "class/net"
)

// Discover finds the CXI NICs in the sysfs tree fsys, which is rooted at the
// sysfs root (os.DirFS("/sys")).
//
// It lists class/cxi and class/cxi_user, reads every cxiN it finds and
// returns them sorted by index. A NIC whose attributes cannot be read or
// parsed is still returned, with Healthy false and its Problems naming each
// file; the other NICs are unaffected. Missing optional attributes
// (numa_node, rgids_avail, uc/app_version, fru/description) are not
// problems.
//
// No CXI driver loaded (neither class directory exists) is an empty
// Discovery and no error. Discover returns an error only when fsys is nil or
// the class directories exist but cannot be read.
func Discover(fsys fs.FS) (*Discovery, error) {
	if fsys == nil {
		return nil, errors.New("discover cxi devices: nil file system")
	}
	d := &Discovery{}
	bases := make(map[string]string)
	var dirErrs []error
	for _, class := range []string{classCXI, classCXIUser} {
		entries, err := fs.ReadDir(fsys, class)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				dirErrs = append(dirErrs, attrErr(class, err))
			}
			continue
		}
		for _, e := range entries {
			if _, seen := bases[e.Name()]; !seen {
				bases[e.Name()] = class + "/" + e.Name()
			}
		}
	}
	if len(dirErrs) > 0 && len(bases) == 0 {
		return nil, fmt.Errorf("discover cxi devices: %w", errors.Join(dirErrs...))
	}
	d.Problems = append(d.Problems, dirErrs...)

	netdevs, netProblems := indexNetDevs(fsys)
	d.Problems = append(d.Problems, netProblems...)

	names := make([]string, 0, len(bases))
	for name := range bases {
		names = append(names, name)
	}
	slices.Sort(names)
	d.NICs = make([]NIC, 0, len(names))
	for _, name := range names {
		index, err := parseCXIName(name)
		if err != nil {
			d.Problems = append(d.Problems, parseErr(bases[name], err))
			continue
		}
		d.NICs = append(d.NICs, readNIC(fsys, name, index, bases[name], netdevs))
	}
	slices.SortStableFunc(d.NICs, func(a, b NIC) int { return cmp.Compare(a.Index, b.Index) })
	return d, nil
}

// readNIC reads one class device; it never fails, it records problems.
func readNIC(fsys fs.FS, name string, index int, base string, netdevs map[string]string) NIC {
	r := &attrReader{fsys: fsys}
	nic := NIC{Name: name, Index: index, Path: base, NUMANode: -1}
	nic.Properties.RGIDsAvail = -1

	dev := base + "/device"
	addr, _, err := pcisysfs.LinkedAddress(fsys, dev)
	if err != nil {
		r.fail(err)
		return r.finish(nic)
	}
	nic.PCIAddress = addr
	if _, err := fs.Stat(fsys, dev); err != nil {
		// The link resolves to nothing: every attribute below is gone.
		r.fail(attrErr(dev, err))
		return r.finish(nic)
	}

	ids, problems := pcisysfs.ReadFunction(fsys, dev, pcisysfs.AttrVendor|pcisysfs.AttrDevice)
	r.problems = append(r.problems, problems...)
	nic.VendorID, nic.DeviceID = ids.VendorID, ids.DeviceID
	if len(problems) == 0 {
		gen, vf, ok := Identify(nic.VendorID, nic.DeviceID)
		if !ok {
			r.fail(parseErr(dev+"/device", fmt.Errorf("%w: PCI ID %04x:%04x is not a Cassini NIC",
				ErrInvalidValue, nic.VendorID, nic.DeviceID)))
		}
		if gen == Cassini1 {
			vf = cassini1VF(r, dev)
		}
		nic.Generation, nic.VF = gen, vf
	}
	// numa_node may be absent (-1); the driver link is absent when none is
	// bound, and read from the uevent where links cannot be read.
	loc, problems := pcisysfs.ReadFunction(fsys, dev, pcisysfs.AttrNUMANode|pcisysfs.AttrDriver)
	r.problems = append(r.problems, problems...)
	nic.NUMANode, nic.Driver = loc.NUMANode, loc.Driver

	p := dev + "/properties/"
	props := &nic.Properties
	field(r, p+"nid", parseHex32, &props.NID)
	field(r, p+"pid_bits", parsePIDBits, &props.PIDBits)
	field(r, p+"pid_count", parseCount, &props.PIDCount)
	field(r, p+"pid_granule", parseCount, &props.PIDGranule)
	field(r, p+"link", parseBit, &props.Link)
	field(r, p+"speed", parseSpeed, &props.SpeedMbps)
	field(r, p+"pct_eq", parseUint32, &props.PCTEq)
	field(r, p+"cassini_version", parseCassiniVersion, &props.CassiniVersion)
	field(r, p+"num_ptes", parseCount, &props.Max.PTEs)
	field(r, p+"num_txqs", parseCount, &props.Max.TXQs)
	field(r, p+"num_tgqs", parseCount, &props.Max.TGQs)
	field(r, p+"num_eqs", parseCount, &props.Max.EQs)
	field(r, p+"num_cts", parseCount, &props.Max.CTs)
	field(r, p+"num_acs", parseCount, &props.Max.ACs)
	field(r, p+"num_tles", parseCount, &props.Max.TLEs)
	field(r, p+"num_les", parseCount, &props.Max.LEs)
	optionalField(r, p+"rgids_avail", parseCount, &props.RGIDsAvail)

	// PF only, and empty when the uC or the FRU EEPROM says nothing.
	optionalField(r, dev+"/uc/app_version", parseText, &nic.FirmwareVersion)
	optionalField(r, dev+"/fru/description", parseText, &nic.FRUDescription)

	if ndName, ok := netdevs[addr]; ok {
		nic.NetDev = readNetDev(r, ndName)
	}
	return r.finish(nic)
}

// cassini1VF reports whether the Cassini-1 function at dev is a VF. Its PF
// and VFs share one PCI device ID, so the driver's probe (ss1/cass_core.c)
// decides by the length of BAR 0, from the PCI resource file: below
// PFBAR0Size it is a VF. A resource file that cannot be read or parsed is
// recorded as a problem, and the function is taken for a PF.
func cassini1VF(r *attrReader, dev string) bool {
	fn, problems := pcisysfs.ReadFunction(r.fsys, dev, pcisysfs.AttrResources)
	if len(problems) > 0 {
		r.problems = append(r.problems, problems...)
		return false
	}
	return fn.Resources[0].Len() < PFBAR0Size
}

// readNetDev reads class/net/<name>.
func readNetDev(r *attrReader, name string) *NetDev {
	base := classNet + "/" + name
	nd := &NetDev{Name: name, SpeedMbps: -1}
	field(r, base+"/operstate", parseOperState, &nd.OperState)
	field(r, base+"/address", parseMAC, &nd.MAC)
	field(r, base+"/addr_assign_type", parseAddrAssignType, &nd.AddrAssignType)
	// The kernel answers EINVAL to a read of speed while the link is down;
	// that is "unknown", not a broken tree.
	s, err := pcisysfs.ReadAttr(r.fsys, base+"/speed")
	switch {
	case err == nil:
		v, perr := parseSpeed(s)
		if perr != nil {
			r.fail(parseErr(base+"/speed", perr))
		} else {
			nd.SpeedMbps = v
		}
	case errors.Is(err, fs.ErrNotExist) || nd.OperState == OperStateUp:
		r.fail(attrErr(base+"/speed", err))
	}
	return nd
}

// indexNetDevs maps PCI addresses to the netdev whose device link points at
// them, as cxi_stat's get_network_device does. Netdevs without a device link
// (lo, bridges) or whose parent is not a PCI function (virtio) are skipped.
func indexNetDevs(fsys fs.FS) (map[string]string, []error) {
	entries, err := fs.ReadDir(fsys, classNet)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{attrErr(classNet, err)}
	}
	var problems []error
	byAddr := make(map[string]string, len(entries))
	for _, e := range entries { // ReadDir sorts by name, so the first wins.
		name := e.Name()
		addr, _, err := pcisysfs.LinkedAddress(fsys, classNet+"/"+name+"/device")
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrInvalidValue) {
				problems = append(problems, err)
			}
			continue
		}
		if prev, dup := byAddr[addr]; dup {
			problems = append(problems, fmt.Errorf("netdevs %s and %s share PCI function %s; using %s",
				prev, name, addr, prev))
			continue
		}
		byAddr[addr] = name
	}
	return byAddr, problems
}

// attrReader reads the attributes of one NIC and collects the problems.
type attrReader struct {
	fsys     fs.FS
	problems []error
}

func (r *attrReader) fail(err error) { r.problems = append(r.problems, err) }

// finish stores the problems in nic and decides its health.
func (r *attrReader) finish(nic NIC) NIC {
	nic.Problems = r.problems
	nic.Healthy = len(r.problems) == 0 && nic.Properties.Link
	return nic
}

// field reads and parses the required attribute p into dst; a missing,
// unreadable or invalid attribute is recorded. It reports success.
func field[T any](r *attrReader, p string, parse func(string) (T, error), dst *T) bool {
	return readInto(r, p, parse, dst, false)
}

// optionalField is field for an attribute that may be absent; dst keeps its
// value then and nothing is recorded.
func optionalField[T any](r *attrReader, p string, parse func(string) (T, error), dst *T) bool {
	return readInto(r, p, parse, dst, true)
}

func readInto[T any](r *attrReader, p string, parse func(string) (T, error), dst *T, optional bool) bool {
	s, err := pcisysfs.ReadAttr(r.fsys, p)
	if err != nil {
		if !optional || !errors.Is(err, fs.ErrNotExist) {
			r.fail(attrErr(p, err))
		}
		return false
	}
	v, err := parse(s)
	if err != nil {
		r.fail(parseErr(p, err))
		return false
	}
	*dst = v
	return true
}

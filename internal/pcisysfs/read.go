package pcisysfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
)

// maxAttrSize bounds what is read from one attribute. The kernel prints at
// most a page; a larger file is not a sysfs attribute.
const maxAttrSize = 64 << 10

// maxEmptyReads bounds the reads in a row that return nothing and no error:
// a file that keeps doing that is refused instead of read forever.
const maxEmptyReads = 100

// ReadAttr reads one attribute file of at most 64 KiB. Attributes are a few
// bytes long, so it reads into a small buffer that grows as needed. A larger
// file is an error wrapping [ErrInvalidValue]; a reader that makes no
// progress gives [io.ErrNoProgress].
func ReadAttr(fsys fs.FS, p string) (string, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 0, 64)
	for empty := 0; ; {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n == 0 && err == nil {
			if empty++; empty > maxEmptyReads {
				return "", io.ErrNoProgress
			}
			continue
		}
		empty = 0
		if len(buf) > maxAttrSize {
			return "", fmt.Errorf("%w: larger than %d bytes", ErrInvalidValue, maxAttrSize)
		}
		if errors.Is(err, io.EOF) {
			return string(buf), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// Read reads the file p of the tree fsys (which the errors call fsName) and
// parses it. Errors are *AttrError naming p: errors.Is(err, ErrMissing)
// when it does not exist, wrapping ErrInvalidValue when parse refuses it.
func Read[T any](fsys fs.FS, fsName, p string, parse func(string) (T, error)) (T, error) {
	var zero T
	s, err := ReadAttr(fsys, p)
	if err != nil {
		return zero, NewAttrError(fsName, p, err)
	}
	v, err := parse(s)
	if err != nil {
		return zero, &AttrError{FS: fsName, Path: p, Err: err}
	}
	return v, nil
}

// LinkedAddress returns the address of the PCI function that the link at
// link points to (a class device's "device" link, bus/pci/devices/<addr>,
// physfn): the basename of its target, the lookup libcxi and cxi_stat do.
// Where the file system cannot read links (or link is not one) it reads
// PCI_SLOT_NAME from link/uevent instead, and returns that file's parsed
// content for further use. Errors are *AttrError; errors.Is(err,
// ErrMissing) when there is no link.
func LinkedAddress(fsys fs.FS, link string) (addr string, uevent map[string]string, err error) {
	target, lerr := fs.ReadLink(fsys, link)
	if lerr == nil {
		addr, err := ParseAddress(path.Base(target))
		if err != nil {
			return "", nil, &AttrError{FS: SysFS, Path: link, Err: fmt.Errorf("link target %q: %w", target, err)}
		}
		return addr, nil, nil
	}
	if errors.Is(lerr, fs.ErrNotExist) {
		return "", nil, NewAttrError(SysFS, link, lerr)
	}
	s, rerr := ReadAttr(fsys, link+"/uevent")
	if rerr != nil {
		return "", nil, NewAttrError(SysFS, link+"/uevent", rerr)
	}
	env, perr := ParseUevent(s)
	if perr == nil {
		addr, perr = ParseAddress(env["PCI_SLOT_NAME"])
	}
	if perr != nil {
		return "", nil, &AttrError{FS: SysFS, Path: link + "/uevent", Err: perr}
	}
	return addr, env, nil
}

// Attr selects what [ReadFunction] reads.
type Attr uint

// The attributes of a PCI function. Vendor, device, class and the resource
// file are required: a missing one is a problem. The others may be absent:
// numa_node (-1 then), local_cpulist (nil), the driver link (no driver
// bound), physfn (not a VF) and virtfnN (no VFs).
const (
	AttrVendor    Attr = 1 << iota // vendor
	AttrDevice                     // device
	AttrClass                      // class
	AttrNUMANode                   // numa_node
	AttrLocalCPUs                  // local_cpulist
	AttrDriver                     // the driver link, or DRIVER= in uevent
	AttrResources                  // resource
	AttrSRIOV                      // the physfn and virtfnN links
)

// Function is what [ReadFunction] read of one PCI function; what it was not
// asked for keeps its zero value (NUMANode -1).
type Function struct {
	// Dir is the function's directory (or a link to it), relative to the
	// sysfs root.
	Dir string
	// VendorID, DeviceID and Class are the PCI IDs and class code.
	VendorID, DeviceID uint16
	Class              uint32
	// NUMANode is the function's NUMA node; -1 when unknown.
	NUMANode int
	// LocalCPUs are the CPUs local to the function; nil when unknown.
	LocalCPUs []int
	// Driver is the bound driver ("cxi_ss1", "nvidia"); empty when none.
	Driver string
	// Resources are the lines of the resource file: BAR 0 to 5, the ROM,
	// then bridge windows or SR-IOV BARs.
	Resources []Resource
	// PhysFn is the address of a VF's physical function; empty for a PF.
	PhysFn string
	// VirtFns are a PF's VFs' addresses, virtfn0 first; nil when it has
	// none.
	VirtFns []string
}

// ReadFunction reads the attributes attrs of the PCI function whose
// directory (or a link to it) is dir. It never fails: each attribute that
// is required and missing, cannot be read, or is garbled adds an
// *AttrError naming its file to problems, in the order of the Attr
// constants; the others are read as usual.
func ReadFunction(fsys fs.FS, dir string, attrs Attr) (fn Function, problems []error) {
	fn = Function{Dir: dir, NUMANode: -1}
	fail := func(err error) { problems = append(problems, err) }
	if attrs&AttrVendor != 0 {
		required(fsys, dir+"/vendor", ParseID, &fn.VendorID, fail)
	}
	if attrs&AttrDevice != 0 {
		required(fsys, dir+"/device", ParseID, &fn.DeviceID, fail)
	}
	if attrs&AttrClass != 0 {
		required(fsys, dir+"/class", ParseClass, &fn.Class, fail)
	}
	if attrs&AttrNUMANode != 0 {
		optional(fsys, dir+"/numa_node", ParseNUMANode, &fn.NUMANode, fail)
	}
	if attrs&AttrLocalCPUs != 0 {
		optional(fsys, dir+"/local_cpulist", ParseCPUList, &fn.LocalCPUs, fail)
	}
	if attrs&AttrDriver != 0 {
		fn.Driver = driverName(fsys, dir)
	}
	if attrs&AttrResources != 0 {
		required(fsys, dir+"/resource", ParseResource, &fn.Resources, fail)
	}
	if attrs&AttrSRIOV != 0 {
		fn.PhysFn, fn.VirtFns = readSRIOV(fsys, dir, fail)
	}
	return fn, problems
}

// required reads p into dst; anything but success is a problem.
func required[T any](fsys fs.FS, p string, parse func(string) (T, error), dst *T, fail func(error)) {
	v, err := Read(fsys, SysFS, p, parse)
	if err != nil {
		fail(err)
		return
	}
	*dst = v
}

// optional reads p into dst; a missing file leaves dst as it is.
func optional[T any](fsys fs.FS, p string, parse func(string) (T, error), dst *T, fail func(error)) {
	v, err := Read(fsys, SysFS, p, parse)
	switch {
	case err == nil:
		*dst = v
	case !errors.Is(err, ErrMissing):
		fail(err)
	}
}

// driverName returns the basename of dir/driver, or DRIVER= from dir/uevent
// where links cannot be read; empty when no driver is bound.
func driverName(fsys fs.FS, dir string) string {
	if target, err := fs.ReadLink(fsys, dir+"/driver"); err == nil {
		return path.Base(target)
	}
	env, err := Read(fsys, SysFS, dir+"/uevent", ParseUevent)
	if err != nil {
		return ""
	}
	return env["DRIVER"]
}

// maxVFs bounds a virtfnN index: sriov_totalvfs is a 16-bit count.
const maxVFs = 1 << 16

// readSRIOV reads a VF's physfn link and a PF's virtfnN links.
func readSRIOV(fsys fs.FS, dir string, fail func(error)) (physFn string, virtFns []string) {
	addr, _, err := LinkedAddress(fsys, dir+"/physfn")
	switch {
	case err == nil:
		physFn = addr
	case !errors.Is(err, ErrMissing):
		fail(err)
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		fail(NewAttrError(SysFS, dir, err))
		return physFn, nil
	}
	byIndex := map[int]string{}
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), "virtfn")
		n, err := strconv.Atoi(digits)
		if !ok || err != nil || n < 0 || n >= maxVFs || strconv.Itoa(n) != digits {
			continue
		}
		addr, _, err := LinkedAddress(fsys, dir+"/"+e.Name())
		if err != nil {
			fail(err)
			continue
		}
		byIndex[n] = addr
	}
	for _, n := range slices.Sorted(maps.Keys(byIndex)) {
		virtFns = append(virtFns, byIndex[n])
	}
	return physFn, virtFns
}

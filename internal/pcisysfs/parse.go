package pcisysfs

import (
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// The parsers below take the raw text of one attribute, as the kernel
// prints it (value and trailing newline), and return the value or an error
// wrapping ErrInvalidValue. They are pure and never panic.
//
// Numbers are read as their digits: zero padding is accepted, since it
// does not change the value and the tools that read these files (pciutils,
// libcxi: strtoul, atoi) accept it; a sign the kernel never prints ('+',
// or '-' on an unsigned value) is refused.

// ParseHex parses a hexadecimal attribute of at most bitSize bits (1 to
// 64): PCI IDs ("0x%04x"), classes ("0x%06x"), the CXI driver's NID
// ("0x%x"). The 0x prefix is optional, as with strtoul(s, NULL, 16), and
// surrounding white space is dropped.
func ParseHex(s string, bitSize int) (uint64, error) {
	if bitSize < 1 || bitSize > 64 {
		return 0, Invalid(s, "bit size "+strconv.Itoa(bitSize)+" is not 1 to 64")
	}
	digits := strings.TrimSpace(s)
	if len(digits) >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') {
		digits = digits[2:]
	}
	if digits == "" || !isHexDigits(digits) {
		return 0, Invalid(s, "want a hexadecimal number")
	}
	v, err := strconv.ParseUint(digits, 16, bitSize)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, Invalid(s, "does not fit in "+strconv.Itoa(bitSize)+" bits")
		}
		return 0, Invalid(s, "want a hexadecimal number")
	}
	return v, nil
}

// ParseID parses a 16-bit PCI ID: vendor, device, subsystem_vendor,
// subsystem_device ("0x10de").
func ParseID(s string) (uint16, error) {
	v, err := ParseHex(s, 16)
	return uint16(v), err
}

// ParseClass parses a PCI class code ("0x030200"): base class, subclass
// and programming interface, 24 bits.
func ParseClass(s string) (uint32, error) {
	v, err := ParseHex(s, 24)
	return uint32(v), err
}

// MaxNUMANodes bounds a NUMA node number: the kernel's MAX_NUMNODES is at
// most 1 << NODES_SHIFT, and NODES_SHIFT is at most 10 on every
// architecture.
const MaxNUMANodes = 1 << 10

// ParseNUMANode parses a device's numa_node: a node number, or -1 when the
// platform does not say.
func ParseNUMANode(s string) (int, error) {
	t := strings.TrimSpace(s)
	v, err := strconv.ParseInt(t, 10, 32)
	if err != nil || strings.HasPrefix(t, "+") || v < -1 || v >= MaxNUMANodes {
		return 0, Invalid(s, "want a NUMA node number below 1024, or -1")
	}
	return int(v), nil
}

// MaxCPUs bounds the CPU numbers of a CPU list, with room above the
// largest NR_CPUS any architecture configures (8192).
const MaxCPUs = 1 << 16

// ParseCPUList parses a CPU list as the kernel prints a cpumask with %*pbl
// (local_cpulist, node cpulist): comma-separated CPU numbers and inclusive
// ranges, "0-31,64-95". Like the kernel's bitmap_parselist it takes the
// groups in any order, overlapping or not; stride groups ("0-31:2/4"), which
// the kernel never prints, are refused. It returns the CPUs in ascending
// order, each once; an empty list (an empty mask) is valid and nil.
func ParseCPUList(s string) ([]int, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil, nil
	}
	var set [MaxCPUs / 64]uint64
	for group := range strings.SplitSeq(t, ",") {
		lo, hi, isRange := strings.Cut(group, "-")
		first, err1 := parseCPU(lo)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = parseCPU(hi)
		}
		if err1 != nil || err2 != nil || last < first {
			return nil, Invalid(s, "want CPU numbers and ranges N-M below 65536, separated by commas")
		}
		setRange(&set, first, last)
	}
	var cpus []int
	for w, word := range set {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			cpus = append(cpus, w*64+b)
			word &^= 1 << b
		}
	}
	return cpus, nil
}

// setRange sets the bits first to last of set, a word at a time, so that a
// list of many wide ranges costs little.
func setRange(set *[MaxCPUs / 64]uint64, first, last int) {
	for c := first; c <= last; {
		w, b := c/64, c%64
		n := min(64-b, last-c+1)
		mask := ^uint64(0)
		if n < 64 {
			mask = (1<<n - 1) << b
		}
		set[w] |= mask
		c += n
	}
}

func parseCPU(s string) (int, error) {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, ErrInvalidValue
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v >= MaxCPUs {
		return 0, ErrInvalidValue
	}
	return int(v), nil
}

// ParseAddress parses a PCI function address "DDDD:BB:DD.F": a domain of 4
// to 8 hexadecimal digits (Intel VMD domains have 5), bus, device (5 bits)
// and function (3 bits). It returns the kernel's canonical lower-case form,
// which is the name of the function's sysfs directory.
func ParseAddress(s string) (string, error) {
	t := strings.TrimSpace(s)
	domain, rest, ok1 := strings.Cut(t, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return "", Invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	d, ok4 := hexField(domain, 4, 8, 0xffffffff)
	b, ok5 := hexField(bus, 2, 2, 0xff)
	v, ok6 := hexField(dev, 2, 2, 0x1f)
	f, ok7 := hexField(fn, 1, 1, 0x7)
	if !ok4 || !ok5 || !ok6 || !ok7 {
		return "", Invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	return formatHex(d, 4) + ":" + formatHex(b, 2) + ":" + formatHex(v, 2) + "." + formatHex(f, 1), nil
}

// ParseRootComplex parses the sysfs name of a PCI host bridge, "pci0000:20"
// (domain of 4 to 8 hexadecimal digits, root bus), and returns it in
// canonical lower-case form. A name is not padded, so no white space is
// dropped.
func ParseRootComplex(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "pci")
	domain, bus, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", Invalid(s, "want a PCI root complex pciDDDD:BB")
	}
	d, ok3 := hexField(domain, 4, 8, 0xffffffff)
	b, ok4 := hexField(bus, 2, 2, 0xff)
	if !ok3 || !ok4 {
		return "", Invalid(s, "want a PCI root complex pciDDDD:BB")
	}
	return "pci" + formatHex(d, 4) + ":" + formatHex(b, 2), nil
}

// hexField parses a field of minLen to maxLen hexadecimal digits no greater
// than maxVal.
func hexField(s string, minLen, maxLen int, maxVal uint64) (uint64, bool) {
	if len(s) < minLen || len(s) > maxLen || !isHexDigits(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil && v <= maxVal
}

// isHexDigits reports whether s holds only hexadecimal digits; strconv
// alone would also take a sign or, in some bases, underscores.
func isHexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// formatHex prints v in lower-case hexadecimal, zero-padded to width.
func formatHex(v uint64, width int) string {
	s := strconv.FormatUint(v, 16)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// MaxTopologyDepth bounds the components of a PCI device path: real ones
// have a handful (root complex, root port, switch ports, device).
const MaxTopologyDepth = 32

// ParseDevicePath parses the path of a PCI function's directory below
// devices/, or the target of a link to it (bus/pci/devices/<addr>,
// class/*/*/device), such as
// "../../../devices/pci0000:20/0000:20:01.1/0000:22:00.0". It returns the
// function's address and its place in the PCIe hierarchy: the root complex
// and the bridges from it down to the function. A host bridge nested below
// a root port (Intel VMD's "pci10000:e0") counts as a bridge.
func ParseDevicePath(target string) (string, Topology, error) {
	parts := strings.Split(target, "/")
	if len(parts) > MaxTopologyDepth+8 {
		return "", Topology{}, Invalid(target, "PCI device path too deep")
	}
	start := slices.IndexFunc(parts, func(p string) bool {
		_, err := ParseRootComplex(p)
		return err == nil
	})
	if start < 0 {
		return "", Topology{}, Invalid(target, "no PCI root complex in the device path")
	}
	root, _ := ParseRootComplex(parts[start])
	var chain []string
	for _, p := range parts[start+1:] {
		if p == "" {
			continue
		}
		if a, err := ParseAddress(p); err == nil {
			chain = append(chain, a)
			continue
		}
		if r, err := ParseRootComplex(p); err == nil && len(chain) > 0 {
			chain = append(chain, r)
			continue
		}
		return "", Topology{}, Invalid(target, "PCI device path has a component that is not a PCI address")
	}
	switch {
	case len(chain) == 0:
		return "", Topology{}, Invalid(target, "PCI device path names no device")
	case len(chain) > MaxTopologyDepth:
		return "", Topology{}, Invalid(target, "PCI device path too deep")
	case strings.HasPrefix(chain[len(chain)-1], "pci"):
		return "", Topology{}, Invalid(target, "PCI device path ends in a host bridge")
	}
	return chain[len(chain)-1], Topology{Root: root, Bridges: chain[:len(chain)-1]}, nil
}

// Resource is one line of a PCI function's resource file: a BAR, the
// expansion ROM, a bridge window or an SR-IOV BAR, in that order.
type Resource struct {
	// Start and End are the first and last bus address; both 0 when the
	// resource is not there.
	Start, End uint64
	// Flags are the kernel's IORESOURCE_* flags.
	Flags uint64
}

// Len is the resource's length in bytes, as the kernel's pci_resource_len
// computes it: 0 when End is 0 (not assigned).
func (r Resource) Len() uint64 {
	if r.End == 0 {
		return 0
	}
	return r.End - r.Start + 1
}

// maxResources bounds the lines of a resource file; the kernel prints
// PCI_NUM_RESOURCES of them, 17 at most.
const maxResources = 64

// ParseResource parses a PCI function's resource file: one
// "0x%016llx 0x%016llx 0x%016llx" line (start, end, flags) per resource,
// BAR 0 first. Every line must be well formed, and an assigned resource
// (End not 0) must be a range of addresses whose length fits 64 bits.
func ParseResource(s string) ([]Resource, error) {
	var rs []Resource
	for line := range strings.Lines(s) {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, Invalid(line, "want start, end and flags on each line")
		}
		var v [3]uint64
		for i, f := range fields {
			digits, ok := strings.CutPrefix(f, "0x")
			n, err := strconv.ParseUint(digits, 16, 64)
			if !ok || !isHexDigits(digits) || err != nil {
				return nil, Invalid(line, "want 0x-prefixed hexadecimal numbers")
			}
			v[i] = n
		}
		r := Resource{Start: v[0], End: v[1], Flags: v[2]}
		if r.End != 0 && (r.End < r.Start || r.End-r.Start == ^uint64(0)) {
			return nil, Invalid(line, "not a range of addresses")
		}
		if rs = append(rs, r); len(rs) > maxResources {
			return nil, Invalid(s, "more than 64 resources")
		}
	}
	if len(rs) == 0 {
		return nil, Invalid(s, "no resources")
	}
	return rs, nil
}

// ParseUevent parses a uevent file: KEY=VALUE lines, as the kernel writes
// them for a device (DRIVER=, PCI_ID=, PCI_SLOT_NAME=, ...). Keys are upper
// case letters, digits and '_'; empty lines are skipped.
func ParseUevent(s string) (map[string]string, error) {
	env := make(map[string]string, 8)
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.IndexFunc(k, notUeventKeyRune) >= 0 {
			return nil, Invalid(line, "want KEY=VALUE lines")
		}
		env[k] = v
	}
	return env, nil
}

func notUeventKeyRune(r rune) bool {
	return (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_'
}

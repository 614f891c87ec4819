package sysfs

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The parsers below take the raw text of one sysfs attribute, as the kernel
// prints it (value and a trailing newline), and return the value or an error
// wrapping ErrInvalidValue. They are pure and never panic.

// trimValue drops the surrounding white space; the kernel ends every value
// with "\n" and libcxi's fscanf also skips leading blanks.
func trimValue(s string) string { return strings.TrimSpace(s) }

// parseHex32 parses a "0x%x" value (nid, nic_addr). The prefix is optional,
// as with sscanf("%x").
func parseHex32(s string) (uint32, error) {
	v, err := parseHex(s, 32)
	return uint32(v), err
}

// parseHex16 parses a 16-bit "0x%04x" value (PCI vendor and device IDs).
func parseHex16(s string) (uint16, error) {
	v, err := parseHex(s, 16)
	return uint16(v), err
}

func parseHex(s string, bits int) (uint64, error) {
	t := trimValue(s)
	digits := t
	if len(digits) >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') {
		digits = digits[2:]
	}
	if digits == "" {
		return 0, invalid(s, "want a hexadecimal number")
	}
	v, err := strconv.ParseUint(digits, 16, bits)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, invalid(s, "does not fit in "+strconv.Itoa(bits)+" bits")
		}
		return 0, invalid(s, "want a hexadecimal number")
	}
	return v, nil
}

// parseBAR0Size parses a PCI function's resource file, one
// "0x%016llx 0x%016llx 0x%016llx" line (start, end, flags) per resource,
// and returns the length of BAR 0, the first line. Like the kernel's
// pci_resource_len, an end of 0 (a BAR not assigned) is length 0.
func parseBAR0Size(s string) (uint64, error) {
	line, _, _ := strings.Cut(s, "\n")
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return 0, invalid(s, "want start, end and flags on the first line")
	}
	var v [3]uint64
	for i, f := range fields {
		if !strings.HasPrefix(f, "0x") {
			return 0, invalid(s, "want 0x-prefixed hexadecimal numbers")
		}
		n, err := parseHex(f, 64)
		if err != nil {
			return 0, err
		}
		v[i] = n
	}
	start, end := v[0], v[1]
	switch {
	case end == 0:
		return 0, nil
	case end < start || end-start == ^uint64(0):
		return 0, invalid(s, "BAR 0 is not a range of addresses")
	}
	return end - start + 1, nil
}

// parseDecimal parses a "%d" value: a signed decimal that fits a C int.
func parseDecimal(s string) (int, error) {
	t := trimValue(s)
	v, err := strconv.ParseInt(t, 10, 32)
	if err != nil {
		return 0, invalid(s, "want a decimal integer")
	}
	return int(v), nil
}

// parseUint32 parses a "%u" value (pct_eq, rgids_avail).
func parseUint32(s string) (uint32, error) {
	t := trimValue(s)
	if strings.HasPrefix(t, "+") {
		return 0, invalid(s, "want an unsigned decimal integer")
	}
	v, err := strconv.ParseUint(t, 10, 32)
	if err != nil {
		return 0, invalid(s, "want an unsigned decimal integer")
	}
	return uint32(v), nil
}

// parseCount parses a non-negative "%d" value (the num_* maxima, pid_count,
// pid_granule, rgids_avail).
func parseCount(s string) (int, error) {
	v, err := parseDecimal(s)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, invalid(s, "want a non-negative count")
	}
	return v, nil
}

// parseBit parses the properties/link value: "1" when the PHY is running,
// "0" otherwise.
func parseBit(s string) (bool, error) {
	switch trimValue(s) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, invalid(s, "want 0 or 1")
}

// parseNUMANode parses a PCI device's numa_node; -1 means the platform does
// not say.
func parseNUMANode(s string) (int, error) {
	v, err := parseDecimal(s)
	if err != nil {
		return 0, err
	}
	if v < -1 {
		return 0, invalid(s, "want a node number or -1")
	}
	return v, nil
}

// parseSpeed parses a speed in Mb/s (properties/speed, class/net/*/speed);
// -1 is the kernel's SPEED_UNKNOWN.
func parseSpeed(s string) (int, error) {
	v, err := parseDecimal(s)
	if err != nil {
		return 0, err
	}
	if v < -1 {
		return 0, invalid(s, "want a speed in Mb/s or -1")
	}
	return v, nil
}

// maxPIDBits is DFA_EP_BITS: pid_granule = 1 << (17 - pid_bits).
const maxPIDBits = 17

// parsePIDBits parses properties/pid_bits.
func parsePIDBits(s string) (int, error) {
	v, err := parseDecimal(s)
	if err != nil {
		return 0, err
	}
	if v < 1 || v > maxPIDBits {
		return 0, invalid(s, "want 1 to 17 PID bits")
	}
	return v, nil
}

// parseCassiniVersion parses properties/cassini_version. Like libcxi, it
// accepts only the versions the driver names; the driver prints "unknown"
// for anything else.
func parseCassiniVersion(s string) (string, error) {
	switch t := trimValue(s); t {
	case "1.0", "1.1", "2.0":
		return t, nil
	}
	return "", invalid(s, "want 1.0, 1.1 or 2.0")
}

// parseText parses a free-text attribute (uc/app_version, fru/description).
// An empty value is valid: the driver prints nothing when the uC did not
// report it.
func parseText(s string) (string, error) {
	t := trimValue(s)
	if !utf8.ValidString(t) {
		return "", invalid(s, "not UTF-8 text")
	}
	for _, r := range t {
		if unicode.IsControl(r) {
			return "", invalid(s, "control character in text")
		}
	}
	return t, nil
}

// parsePCIAddress parses a PCI function address "DDDD:BB:DD.F" (domain, bus,
// device, function, hexadecimal), the basename of a "device" link, and
// returns it in the kernel's canonical lower-case form.
func parsePCIAddress(s string) (string, error) {
	t := trimValue(s)
	domain, rest, ok1 := strings.Cut(t, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return "", invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	d, err1 := hexField(domain, 4, 8, 0xffffffff)
	b, err2 := hexField(bus, 2, 2, 0xff)
	v, err3 := hexField(dev, 2, 2, 0x1f)
	f, err4 := hexField(fn, 1, 1, 0x7)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return "", invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	return formatPCIAddress(d, b, v, f), nil
}

// hexField parses a fixed-width hexadecimal field of minLen to maxLen digits
// no greater than maxVal.
func hexField(s string, minLen, maxLen int, maxVal uint64) (uint64, error) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, ErrInvalidValue
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v > maxVal {
		return 0, ErrInvalidValue
	}
	return v, nil
}

func formatPCIAddress(domain, bus, dev, fn uint64) string {
	const hexdigits = "0123456789abcdef"
	var b []byte
	d := strconv.FormatUint(domain, 16)
	for i := len(d); i < 4; i++ {
		b = append(b, '0')
	}
	b = append(b, d...)
	b = append(b, ':', hexdigits[bus>>4], hexdigits[bus&0xf], ':',
		hexdigits[dev>>4], hexdigits[dev&0xf], '.', hexdigits[fn])
	return string(b)
}

// parseUevent parses a uevent file: KEY=VALUE lines, as the kernel writes
// them for a PCI device (DRIVER=, PCI_ID=, PCI_SLOT_NAME=, ...).
func parseUevent(s string) (map[string]string, error) {
	env := make(map[string]string, 8)
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.IndexFunc(k, notUeventKeyRune) >= 0 {
			return nil, invalid(line, "want KEY=VALUE lines")
		}
		env[k] = v
	}
	return env, nil
}

func notUeventKeyRune(r rune) bool {
	return (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_'
}

// maxCXIIndex bounds the number in a cxiN name. The driver's counter is
// global and grows on every probe, so it may pass the 256 chrdev minors of
// one load after rebinds; anything beyond this is garbage.
const maxCXIIndex = 1 << 20

// parseCXIName parses a class device name "cxiN" and returns N.
func parseCXIName(s string) (int, error) {
	digits, ok := strings.CutPrefix(s, "cxi")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, invalid(s, "want a device name cxiN")
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, invalid(s, "want a device name cxiN")
		}
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v > maxCXIIndex {
		return 0, invalid(s, "device number out of range")
	}
	return v, nil
}

// parseMAC parses class/net/*/address, a 48-bit MAC "xx:xx:xx:xx:xx:xx".
func parseMAC(s string) (net.HardwareAddr, error) {
	t := trimValue(s)
	if len(t) != len("00:00:00:00:00:00") {
		return nil, invalid(s, "want a MAC address xx:xx:xx:xx:xx:xx")
	}
	mac, err := net.ParseMAC(t)
	if err != nil || len(mac) != 6 || strings.Contains(t, "-") || strings.Contains(t, ".") {
		return nil, invalid(s, "want a MAC address xx:xx:xx:xx:xx:xx")
	}
	return mac, nil
}

// Operational states of a netdev (RFC 2863), as class/net/*/operstate
// prints them.
const (
	OperStateUnknown        = "unknown"
	OperStateNotPresent     = "notpresent"
	OperStateDown           = "down"
	OperStateLowerLayerDown = "lowerlayerdown"
	OperStateTesting        = "testing"
	OperStateDormant        = "dormant"
	OperStateUp             = "up"
)

// parseOperState parses class/net/*/operstate.
func parseOperState(s string) (string, error) {
	switch t := trimValue(s); t {
	case OperStateUnknown, OperStateNotPresent, OperStateDown,
		OperStateLowerLayerDown, OperStateTesting, OperStateDormant, OperStateUp:
		return t, nil
	}
	return "", invalid(s, "not an operational state")
}

// Values of class/net/*/addr_assign_type (NET_ADDR_* in linux/netdevice.h).
const (
	AddrAssignPermanent = 0
	AddrAssignRandom    = 1
	AddrAssignStolen    = 2
	// AddrAssignSet means the MAC was set from user space: the Slingshot
	// algorithmic MAC. libfabric's CXI provider requires it (the AMA check).
	AddrAssignSet = 3
)

// parseAddrAssignType parses class/net/*/addr_assign_type.
func parseAddrAssignType(s string) (int, error) {
	v, err := parseDecimal(s)
	if err != nil {
		return 0, err
	}
	if v < AddrAssignPermanent || v > AddrAssignSet {
		return 0, invalid(s, "want 0 to 3")
	}
	return v, nil
}

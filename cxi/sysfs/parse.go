package sysfs

import (
	"net"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// The parsers below take the raw text of one sysfs attribute, as the kernel
// prints it (value and a trailing newline), and return the value or an error
// wrapping ErrInvalidValue. They are pure and never panic. The PCI
// attributes (address, IDs, numa_node, resource, uevent) are read by
// internal/pcisysfs, which gpu shares.

// trimValue drops the surrounding white space; the kernel ends every value
// with "\n" and libcxi's fscanf also skips leading blanks.
func trimValue(s string) string { return strings.TrimSpace(s) }

// parseHex32 parses a "0x%x" value (nid, nic_addr). The prefix is optional,
// as with sscanf("%x").
func parseHex32(s string) (uint32, error) {
	v, err := pcisysfs.ParseHex(s, 32)
	return uint32(v), err
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

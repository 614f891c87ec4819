package gpu

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The parsers below are pure functions of an attribute's text. They never
// panic, and every error they return wraps ErrInvalidValue.

// parseHex parses a "0x"-prefixed (or bare) hexadecimal attribute of at most
// bits bits, as the kernel prints PCI vendor, device and class.
func parseHex(s string, bits int) (uint64, error) {
	t := strings.TrimSpace(s)
	digits := t
	if len(t) > 1 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') {
		digits = t[2:]
	}
	if digits == "" || len(digits) > bits/4 {
		return 0, invalid(s, "want a hexadecimal number")
	}
	v, err := strconv.ParseUint(digits, 16, bits)
	if err != nil {
		return 0, invalid(s, "want a hexadecimal number")
	}
	return v, nil
}

// parseHex16 parses a PCI vendor or device ID, "0x10de".
func parseHex16(s string) (uint16, error) {
	v, err := parseHex(s, 16)
	return uint16(v), err
}

// parseClass parses a PCI class code, "0x030200": base class, subclass and
// programming interface, 24 bits.
func parseClass(s string) (uint32, error) {
	v, err := parseHex(s, 24)
	return uint32(v), err
}

// parseNUMANode parses a PCI device's numa_node: a node number, or -1 when
// the platform does not say.
func parseNUMANode(s string) (int, error) {
	t := strings.TrimSpace(s)
	if t == "" || len(t) > 5 {
		return 0, invalid(s, "want a NUMA node number or -1")
	}
	v, err := strconv.Atoi(t)
	if err != nil || v < -1 || (t[0] == '+') || (len(t) > 1 && t[0] == '0') {
		return 0, invalid(s, "want a NUMA node number or -1")
	}
	return v, nil
}

// parsePCIAddress parses a PCI function address "DDDD:BB:DD.F" (domain of 4
// to 8 hexadecimal digits, bus, device, function) and returns the kernel's
// canonical lower-case form.
func parsePCIAddress(s string) (string, error) {
	t := strings.TrimSpace(s)
	domain, rest, ok1 := strings.Cut(t, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return "", invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	d, ok4 := hexField(domain, 4, 8, 0xffffffff)
	b, ok5 := hexField(bus, 2, 2, 0xff)
	v, ok6 := hexField(dev, 2, 2, 0x1f)
	f, ok7 := hexField(fn, 1, 1, 0x7)
	if !ok4 || !ok5 || !ok6 || !ok7 {
		return "", invalid(s, "want a PCI address DDDD:BB:DD.F")
	}
	return formatHex(d, 4) + ":" + formatHex(b, 2) + ":" + formatHex(v, 2) + "." + formatHex(f, 1), nil
}

// parseRootComplex parses the sysfs name of a PCI host bridge,
// "pci0000:20" (domain of 4 to 8 digits, root bus), and returns it in
// canonical form.
func parseRootComplex(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "pci")
	domain, bus, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", invalid(s, "want a PCI root complex pciDDDD:BB")
	}
	d, ok3 := hexField(domain, 4, 8, 0xffffffff)
	b, ok4 := hexField(bus, 2, 2, 0xff)
	if !ok3 || !ok4 {
		return "", invalid(s, "want a PCI root complex pciDDDD:BB")
	}
	return "pci" + formatHex(d, 4) + ":" + formatHex(b, 2), nil
}

// hexField parses a field of minLen to maxLen hexadecimal digits no greater
// than maxVal.
func hexField(s string, minLen, maxLen int, maxVal uint64) (uint64, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil && v <= maxVal
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// formatHex prints v in lower-case hexadecimal, zero-padded to width.
func formatHex(v uint64, width int) string {
	s := strconv.FormatUint(v, 16)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// maxTopologyDepth bounds the components of a PCI device path; real ones
// have a handful (root complex, root port, switch ports, device).
const maxTopologyDepth = 32

// parseTopology parses the target of a bus/pci/devices/<addr> link (or a
// path below devices/), "../../../devices/pci0000:20/0000:20:01.1/0000:22:00.0",
// and returns the device's address and its place in the PCIe hierarchy: the
// root complex and the bridges from it down to the device. A nested host
// bridge (Intel VMD's "pci10000:e0" below a root port) counts as a bridge.
func parseTopology(target string) (string, PCIPath, error) {
	parts := strings.Split(target, "/")
	if len(parts) > maxTopologyDepth+8 {
		return "", PCIPath{}, invalid(target, "PCI device path too deep")
	}
	start := -1
	for i, p := range parts {
		if strings.HasPrefix(p, "pci") {
			if _, err := parseRootComplex(p); err == nil {
				start = i
				break
			}
		}
	}
	if start < 0 {
		return "", PCIPath{}, invalid(target, "no PCI root complex in the device path")
	}
	root, _ := parseRootComplex(parts[start])
	var chain []string
	for _, p := range parts[start+1:] {
		if p == "" {
			continue
		}
		if a, err := parsePCIAddress(p); err == nil {
			chain = append(chain, a)
			continue
		}
		if r, err := parseRootComplex(p); err == nil && len(chain) > 0 {
			chain = append(chain, r)
			continue
		}
		return "", PCIPath{}, invalid(target, "PCI device path has a component that is not a PCI address")
	}
	if len(chain) == 0 {
		return "", PCIPath{}, invalid(target, "PCI device path names no device")
	}
	if len(chain) > maxTopologyDepth {
		return "", PCIPath{}, invalid(target, "PCI device path too deep")
	}
	dev := chain[len(chain)-1]
	if strings.HasPrefix(dev, "pci") {
		return "", PCIPath{}, invalid(target, "PCI device path ends in a host bridge")
	}
	return dev, PCIPath{Root: root, Bridges: chain[:len(chain)-1]}, nil
}

// parseText parses a one-line free-text attribute (AMD's product_name, the
// NVIDIA "Model:" value). Empty text is invalid: a product must have a name.
func parseText(s string) (string, error) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return "", invalid(s, "empty")
	case len(t) > 256:
		return "", invalid(s, "longer than 256 bytes")
	case !utf8.ValidString(t):
		return "", invalid(s, "not UTF-8 text")
	}
	for _, r := range t {
		if unicode.IsControl(r) {
			return "", invalid(s, "control character in text")
		}
	}
	return t, nil
}

// nvidiaInfo is what /proc/driver/nvidia/gpus/<bdf>/information says.
type nvidiaInfo struct {
	Model string
	// UUID is "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; empty when the
	// driver did not print one.
	UUID string
	// Minor is the device minor: /dev/nvidia<Minor>.
	Minor int
	// BusLocation is the PCI address the driver reports; empty when absent.
	BusLocation string
	// Excluded reports "GPU Excluded: Yes" (NVreg_ExcludedGpus).
	Excluded bool
}

// maxNVIDIAMinor is the last GPU minor: the driver's control device
// nvidiactl is minor 255.
const maxNVIDIAMinor = 254

// parseNVIDIAInfo parses the NVIDIA driver's per-GPU information file:
// "Key: \t value" lines. Model and Device Minor are required; GPU UUID, Bus
// Location and GPU Excluded are checked when present; other lines are
// ignored.
func parseNVIDIAInfo(s string) (nvidiaInfo, error) {
	var info nvidiaInfo
	var haveModel, haveMinor bool
	for line := range strings.Lines(s) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "Model":
			m, err := parseText(val)
			if err != nil {
				return nvidiaInfo{}, invalid(line, "bad Model")
			}
			info.Model, haveModel = m, true
		case "Device Minor":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > maxNVIDIAMinor || val[0] == '+' || (len(val) > 1 && val[0] == '0') {
				return nvidiaInfo{}, invalid(line, "bad Device Minor")
			}
			info.Minor, haveMinor = n, true
		case "GPU UUID":
			u, err := parseNVIDIAUUID(val)
			if err != nil {
				return nvidiaInfo{}, invalid(line, "bad GPU UUID")
			}
			info.UUID = u
		case "Bus Location":
			a, err := parsePCIAddress(val)
			if err != nil {
				return nvidiaInfo{}, invalid(line, "bad Bus Location")
			}
			info.BusLocation = a
		case "GPU Excluded":
			switch val {
			case "Yes":
				info.Excluded = true
			case "No":
			default:
				return nvidiaInfo{}, invalid(line, "bad GPU Excluded")
			}
		}
	}
	switch {
	case !haveModel:
		return nvidiaInfo{}, invalid(s, "no Model line")
	case !haveMinor:
		return nvidiaInfo{}, invalid(s, "no Device Minor line")
	}
	return info, nil
}

// parseNVIDIAUUID checks an NVIDIA GPU UUID, "GPU-" and a UUID of 8-4-4-4-12
// hexadecimal digits, and returns it with the hex in lower case.
func parseNVIDIAUUID(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "GPU-")
	groups := strings.Split(rest, "-")
	if !ok || len(groups) != 5 {
		return "", invalid(s, "want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
	}
	for i, want := range []int{8, 4, 4, 4, 12} {
		if _, ok := hexField(groups[i], want, want, 1<<48-1); !ok {
			return "", invalid(s, "want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
		}
	}
	return "GPU-" + strings.ToLower(rest), nil
}

// parseAMDUniqueID parses amdgpu's unique_id attribute, 16 hexadecimal
// digits, and returns the UUID that ROCm's ROCR_VISIBLE_DEVICES accepts,
// "GPU-" and the same digits.
func parseAMDUniqueID(s string) (string, error) {
	t := strings.TrimSpace(s)
	if _, ok := hexField(t, 1, 16, 1<<64-1); !ok {
		return "", invalid(s, "want up to 16 hexadecimal digits")
	}
	v, _ := strconv.ParseUint(t, 16, 64)
	if v == 0 {
		return "", invalid(s, "zero is no unique ID")
	}
	return "GPU-" + formatHex(v, 16), nil
}

// DRM device kinds below a GPU's drm/ directory.
const (
	drmRender = "renderD"
	drmCard   = "card"
)

// parseDRMName parses a DRM class device name, "renderD128" or "card0",
// and returns its kind and number. Connector names ("card0-DP-1") and
// anything else are not device nodes and fail.
func parseDRMName(s string) (kind string, n int, err error) {
	for _, k := range []string{drmRender, drmCard} {
		digits, ok := strings.CutPrefix(s, k)
		if !ok {
			continue
		}
		if digits == "" || len(digits) > 4 || (len(digits) > 1 && digits[0] == '0') {
			return "", 0, invalid(s, "want renderDN or cardN")
		}
		for i := 0; i < len(digits); i++ {
			if digits[i] < '0' || digits[i] > '9' {
				return "", 0, invalid(s, "want renderDN or cardN")
			}
		}
		n, _ := strconv.Atoi(digits)
		return k, n, nil
	}
	return "", 0, invalid(s, "want renderDN or cardN")
}

package gpu

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// The parsers below are pure functions of an attribute's text. They never
// panic, and every error they return wraps ErrInvalidValue. The PCI
// attributes (address, IDs, class, numa_node, the device path) are parsed
// by internal/pcisysfs, which cxi/sysfs shares.

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
			a, err := pcisysfs.ParseAddress(val)
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
		if len(groups[i]) != want || !isHexDigits(groups[i]) {
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
	if t == "" || len(t) > 16 || !isHexDigits(t) {
		return "", invalid(s, "want up to 16 hexadecimal digits")
	}
	v, _ := strconv.ParseUint(t, 16, 64)
	if v == 0 {
		return "", invalid(s, "zero is no unique ID")
	}
	return fmt.Sprintf("GPU-%016x", v), nil
}

// isHexDigits reports whether s holds only hexadecimal digits (no sign, no
// prefix), as a UUID's groups do.
func isHexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
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

package health

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrMalformed is wrapped by every error about an attribute or a netlink
// message that does not have the form the kernel writes.
var ErrMalformed = errors.New("malformed")

// maxAttrLen caps what a sysfs attribute may hold; the kernel's are one
// page at most and ours are a few bytes.
const maxAttrLen = 4096

// attrText returns the attribute's text without the surrounding white space
// (sysfs values end in a newline), or an error when it is empty or too long.
func attrText(b []byte) (string, error) {
	if len(b) > maxAttrLen {
		return "", fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrMalformed)
	}
	return s, nil
}

// parseLink parses properties/link, which the driver prints as 1 when the
// PHY is running and 0 otherwise. It returns whether the link is up.
func parseLink(b []byte) (bool, error) {
	s, err := attrText(b)
	if err != nil {
		return false, err
	}
	switch s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("%w: link %q, want 0 or 1", ErrMalformed, s)
}

// parseRetryHandler parses properties/pct_eq (an unsigned number). The
// retry handler runs when it is not 0, the same test libcxi's
// cxil_rh_running and libfabric make. It returns whether it runs.
func parseRetryHandler(b []byte) (bool, error) {
	s, err := attrText(b)
	if err != nil {
		return false, err
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return false, fmt.Errorf("%w: pct_eq %q", ErrMalformed, s)
	}
	return v != 0, nil
}

// parseSpeed parses a speed in Mb/s as properties/speed and a netdev's
// speed print it ("%d"). The kernel's SPEED_UNKNOWN (-1, or 4294967295
// where printed unsigned) and 0 (no port) both give 0, meaning unknown.
func parseSpeed(b []byte) (int, error) {
	s, err := attrText(b)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: speed %q", ErrMalformed, s)
	}
	switch {
	case v == -1 || v == math.MaxUint32:
		return 0, nil
	case v < 0 || v > math.MaxInt32:
		return 0, fmt.Errorf("%w: speed %q out of range", ErrMalformed, s)
	}
	return int(v), nil
}

// operStates are the RFC 2863 operational states, in the order of the
// kernel's IF_OPER_* values, as /sys/class/net/<if>/operstate and
// IFLA_OPERSTATE give them.
var operStates = [...]string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}

// parseOperState parses a netdev's operstate file and returns the state's
// name, one of the RFC 2863 names the kernel prints.
func parseOperState(b []byte) (string, error) {
	s, err := attrText(b)
	if err != nil {
		return "", err
	}
	for _, name := range operStates {
		if s == name {
			return name, nil
		}
	}
	return "", fmt.Errorf("%w: operstate %q", ErrMalformed, s)
}

// parseCounter parses a netdev statistics counter (an unsigned decimal).
func parseCounter(b []byte) (uint64, error) {
	s, err := attrText(b)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: counter %q", ErrMalformed, s)
	}
	return v, nil
}

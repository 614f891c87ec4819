package hsnlink

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// observed is what the pod's namespace holds under the Spec's name, as
// read from netlink: plain data, so the comparisons below are pure.
type observed struct {
	kind   string         // link type: "macvlan", "ipvlan", "veth"
	mode   string         // "bridge", "l2"; "" for other kinds
	parent int            // the parent's ifindex, 0 when not reported
	up     bool           // administratively up
	mtu    int            // bytes
	addrs  []netip.Prefix // global addresses of the Spec's family
}

// wantMode is the mode a child of m is made in.
func wantMode(m Mode) string {
	if m == IPVLAN {
		return "l2"
	}
	return "bridge"
}

// identityDiffs lists how o differs from s in what Attach cannot repair:
// the kind, the mode and the parent (parentIndex, in the host's namespace).
func identityDiffs(o observed, s Spec, parentIndex int) []string {
	if o.kind != s.Mode.String() {
		return []string{fmt.Sprintf("kind %s, want %s", o.kind, s.Mode)}
	}
	var d []string
	if want := wantMode(s.Mode); o.mode != want {
		d = append(d, fmt.Sprintf("%s mode %s, want %s", o.kind, o.mode, want))
	}
	// A child moved out of its parent's namespace reports the parent's
	// ifindex there (IFLA_LINK, with IFLA_LINK_NETNSID).
	if o.parent != 0 && o.parent != parentIndex {
		d = append(d, fmt.Sprintf("parent ifindex %d, want %d (%s)", o.parent, parentIndex, s.Parent))
	}
	return d
}

// addressDiff says how o's addresses differ from s.Address: "" when it is
// among them. none reports that o has no address of the family at all, so
// that Attach may add it.
func addressDiff(o observed, s Spec) (diff string, none bool) {
	if slices.Contains(o.addrs, s.Address) {
		return "", false
	}
	if len(o.addrs) == 0 {
		return fmt.Sprintf("no address, want %s", s.Address), true
	}
	has := make([]string, len(o.addrs))
	for i, a := range o.addrs {
		has[i] = a.String()
	}
	return fmt.Sprintf("address %s, want %s", strings.Join(has, ", "), s.Address), false
}

// checkDiffs lists every way o differs from what Attach leaves for s.
func checkDiffs(o observed, s Spec, parentIndex int) []string {
	d := identityDiffs(o, s, parentIndex)
	if a, _ := addressDiff(o, s); a != "" {
		d = append(d, a)
	}
	if !o.up {
		d = append(d, "down, want up")
	}
	if s.MTU != 0 && o.mtu != s.MTU {
		d = append(d, fmt.Sprintf("MTU %d, want %d", o.mtu, s.MTU))
	}
	return d
}

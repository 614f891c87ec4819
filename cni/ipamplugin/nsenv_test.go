package ipamplugin

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The end-to-end tests work in network namespaces of their own: one
// standing for the host, with a veth pair whose end "hsn0" stands for the
// hsn netdev (this kernel has no dummy module), and one standing for the
// pod. The real host's links are never touched: the CNI plugins run as
// children of a thread that has entered the stand-in host.

// nsPath names the namespace held by f for a child process, as CNI_NETNS.
func nsPath(f *os.File) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()) }

// nlIn returns a netlink handle in the namespace of ns, closed at cleanup.
func nlIn(t testing.TB, ns *os.File) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// addVeth adds the veth pair name/peer, both up, through h.
func addVeth(t testing.TB, h *netlink.Handle, name, peer string) {
	t.Helper()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	for _, n := range []string{name, peer} {
		l, err := h.LinkByName(n)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatalf("set %s up: %v", n, err)
		}
	}
}

// addrsOf returns the IPv4 addresses of link name through h, and whether
// the link exists.
func addrsOf(t testing.TB, h *netlink.Handle, name string) ([]netip.Prefix, bool) {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, false
		}
		t.Fatalf("link %s: %v", name, err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	var out []netip.Prefix
	for _, a := range as {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	return out, true
}

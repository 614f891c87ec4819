package hsnlink

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// Every test works in namespaces of its own: one standing for the host,
// with a veth pair standing for the hsn netdev (this kernel has no dummy
// module), and one per pod. The real host's links are never touched.

// env is a stand-in host: a namespace with the veth "hsn0" (peer
// "hsnpeer"), both up so that children on hsn0 have carrier.
type env struct {
	t      testing.TB
	host   *os.File
	hostNL *netlink.Handle
}

const testParent = "hsn0"

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, host: testenv.NewNetNS(t)}
	e.hostNL = nlIn(t, e.host)
	e.addVeth(testParent, "hsnpeer")
	return e
}

// addVeth adds an up veth pair in the stand-in host.
func (e *env) addVeth(name, peer string) {
	e.t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
	if err := e.hostNL.LinkAdd(v); err != nil {
		e.t.Fatalf("add veth %s: %v", name, err)
	}
	for _, n := range []string{name, peer} {
		l, err := e.hostNL.LinkByName(n)
		if err == nil {
			err = e.hostNL.LinkSetUp(l)
		}
		if err != nil {
			e.t.Fatalf("set %s up: %v", n, err)
		}
	}
}

// nlIn returns a netlink handle in the namespace of ns, closed at cleanup.
func nlIn(t testing.TB, ns *os.File) *netlink.Handle {
	t.Helper()
	h, err := handleIn(int(ns.Fd()))
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// attach, check: the package's calls, made from a thread in the stand-in
// host, where they look for the parent.
func (e *env) attach(pod Namespace, s Spec) error {
	return testenv.InNetNS(e.host, func() error {
		mac, err := Attach(pod, s)
		if err == nil && len(mac) == 0 {
			return errors.New("attached with no hardware address")
		}
		return err
	})
}

func (e *env) check(pod Namespace, s Spec) error {
	return testenv.InNetNS(e.host, func() error { return Check(pod, s) })
}

func (e *env) hostLinks() []string {
	e.t.Helper()
	return linkNames(e.t, e.hostNL)
}

func linkNames(t testing.TB, h *netlink.Handle) []string {
	t.Helper()
	ls, err := h.LinkList()
	if err != nil {
		t.Fatalf("list links: %v", err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}

// podState is what a pod's namespace shows of one link.
type podState struct {
	kind, mode string
	up         bool
	parent     int
	addrs      []netip.Prefix
}

func readLink(t testing.TB, pod *netlink.Handle, name string, family int) (podState, bool) {
	t.Helper()
	l, err := pod.LinkByName(name)
	if isNotFound(err) {
		return podState{}, false
	}
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	st := podState{kind: l.Type(), up: l.Attrs().Flags&net.FlagUp != 0, parent: l.Attrs().ParentIndex}
	if m, ok := l.(*netlink.Macvlan); ok {
		st.mode = macvlanMode(m.Mode)
	}
	addrs, err := pod.AddrList(l, family)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		if ip.IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		st.addrs = append(st.addrs, netip.PrefixFrom(ip.Unmap(), bits))
	}
	return st, true
}

// fdNS is a Namespace that is a bare descriptor number.
type fdNS int

func (f fdNS) Fd() uintptr { return uintptr(f) }

func spec(addr string) Spec {
	return Spec{Parent: testParent, Address: netip.MustParsePrefix(addr)}
}

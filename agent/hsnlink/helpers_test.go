package hsnlink

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Every test works in namespaces of its own: one standing for the host,
// with a veth pair standing for the hsn netdev (this kernel has no dummy
// module), and one per pod. The real host's links are never touched.

// newNS returns a new network namespace held only by the returned file,
// which the test's cleanup closes, destroying the namespace. It is made on
// a thread of its own, locked and never unlocked, which ends with its
// goroutine: the test's threads never enter it.
func newNS(t testing.TB) *os.File {
	t.Helper()
	var f *os.File
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		return err
	})
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// onThread runs f on a goroutine locked to its thread and never unlocked,
// so that whatever namespace f switches the thread into dies with it, and
// returns f's error.
func onThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- f()
	}()
	return <-done
}

// inNS runs f on a thread in the namespace of ns and returns its error.
func inNS(ns *os.File, f func() error) error {
	fd := int(ns.Fd())
	return onThread(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return f()
	})
}

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
	e := &env{t: t, host: newNS(t)}
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
	return inNS(e.host, func() error { return Attach(pod, s) })
}

func (e *env) check(pod Namespace, s Spec) error {
	return inNS(e.host, func() error { return Check(pod, s) })
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

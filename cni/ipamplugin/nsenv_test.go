package ipamplugin

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The end-to-end tests work in network namespaces of their own: one
// standing for the host, with a veth pair whose end "hsn0" stands for the
// hsn netdev (this kernel has no dummy module), and one standing for the
// pod. The real host's links are never touched: the CNI plugins run as
// children of a thread that has entered the stand-in host.

// newNS returns a new network namespace held only by the returned file,
// which the test's cleanup closes, destroying the namespace and its
// links. It is made on a thread of its own, locked and never unlocked,
// which ends with its goroutine: no other thread of the test enters it.
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

// nsPath names the namespace held by f for a child process, as CNI_NETNS.
func nsPath(f *os.File) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()) }

// onThread runs f on a goroutine locked to its thread and never unlocked,
// so that the namespace f switches the thread into dies with it, and
// returns f's error.
func onThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- f()
	}()
	return <-done
}

// inNS runs f on a thread in the namespace of ns: the processes f starts
// are born there.
func inNS(ns *os.File, f func() error) error {
	fd := int(ns.Fd())
	return onThread(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return f()
	})
}

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

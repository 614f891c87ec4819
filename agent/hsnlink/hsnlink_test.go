package hsnlink

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

func TestAttach(t *testing.T) {
	e := newEnv(t)
	hostBefore := e.hostLinks()
	pod := testenv.NewNetNS(t)
	podNL := nlIn(t, pod)
	s := spec("10.150.3.7/16")

	if err := e.attach(pod, s); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	st, ok := readLink(t, podNL, DefaultName, netlink.FAMILY_V4)
	if !ok {
		t.Fatalf("no %s in the pod's namespace; it has %v", DefaultName, linkNames(t, podNL))
	}
	parent, err := e.hostNL.LinkByName(testParent)
	if err != nil {
		t.Fatal(err)
	}
	want := podState{kind: "macvlan", mode: "bridge", up: true, parent: parent.Attrs().Index, addrs: []netip.Prefix{s.Address}}
	if !equalState(st, want) {
		t.Errorf("pod's %s = %+v, want %+v", DefaultName, st, want)
	}
	if got := linkNames(t, podNL); !slices.Equal(got, []string{DefaultName, "lo"}) {
		t.Errorf("pod's links = %v, want [%s lo]: no temporary name left", got, DefaultName)
	}
	if got := e.hostLinks(); !slices.Equal(got, hostBefore) {
		t.Errorf("host's links = %v, were %v: nothing may be left there", got, hostBefore)
	}
	if err := e.check(pod, s); err != nil {
		t.Errorf("Check after Attach: %v", err)
	}
}

func equalState(a, b podState) bool {
	return a.kind == b.kind && a.mode == b.mode && a.up == b.up && a.parent == b.parent && slices.Equal(a.addrs, b.addrs)
}

func TestAttachNameAndMTU(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	podNL := nlIn(t, pod)
	s := Spec{Parent: testParent, Name: "net1", Address: netip.MustParsePrefix("10.150.3.7/16"), MTU: 1400}
	if err := e.attach(pod, s); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	l, err := podNL.LinkByName("net1")
	if err != nil {
		t.Fatalf("no net1 in the pod: %v", err)
	}
	if l.Attrs().MTU != 1400 {
		t.Errorf("MTU = %d, want 1400", l.Attrs().MTU)
	}
	if err := e.check(pod, s); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestAttachIPv6(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	s := spec("fd00:150::7/64")
	if err := e.attach(pod, s); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	st, _ := readLink(t, nlIn(t, pod), DefaultName, netlink.FAMILY_V6)
	if !slices.Equal(st.addrs, []netip.Prefix{s.Address}) {
		t.Errorf("global v6 addresses = %v, want [%s]", st.addrs, s.Address)
	}
	if err := e.check(pod, s); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// TestAttachIdempotent: a second Attach changes nothing, and one after a
// crash half-way (link down, or no address yet) finishes the work.
func TestAttachIdempotent(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	podNL := nlIn(t, pod)
	s := spec("10.150.3.7/16")
	for i := range 2 {
		if err := e.attach(pod, s); err != nil {
			t.Fatalf("Attach #%d: %v", i+1, err)
		}
	}
	if got := linkNames(t, podNL); !slices.Equal(got, []string{DefaultName, "lo"}) {
		t.Errorf("pod's links after two Attach = %v", got)
	}

	l, err := podNL.LinkByName(DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if err := podNL.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	addrs, err := podNL.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 {
		t.Fatalf("addresses %v, %v", addrs, err)
	}
	if err := podNL.AddrDel(l, &addrs[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.check(pod, s); err == nil {
		t.Fatal("Check of a down link without its address passed")
	}
	if err := e.attach(pod, s); err != nil {
		t.Fatalf("Attach over a half-made link: %v", err)
	}
	if err := e.check(pod, s); err != nil {
		t.Errorf("Check after the repairing Attach: %v", err)
	}
}

// TestAttachMismatch: a link of the name that is not the one asked for is
// an error naming both, and is left as it was.
func TestAttachMismatch(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, e *env, pod *os.File)
		spec  Spec
		want  []string // in the error
	}{{
		name:  "other address",
		setup: attached("10.150.3.7/16"),
		spec:  spec("10.150.3.8/16"),
		want:  []string{"10.150.3.7/16", "10.150.3.8/16"},
	}, {
		name: "other kind",
		setup: func(t *testing.T, e *env, pod *os.File) {
			podNL := nlIn(t, pod)
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: DefaultName}, PeerName: "other"}
			if err := podNL.LinkAdd(v); err != nil {
				t.Fatal(err)
			}
		},
		spec: spec("10.150.3.7/16"),
		want: []string{"kind veth, want macvlan"},
	}, {
		name:  "other mode",
		setup: madeMacvlan(netlink.MACVLAN_MODE_PRIVATE),
		spec:  spec("10.150.3.7/16"),
		want:  []string{"macvlan mode private, want bridge"},
	}, {
		name: "other parent",
		setup: func(t *testing.T, e *env, pod *os.File) {
			e.addVeth("hsn1", "hsn1peer")
			s := spec("10.150.3.7/16")
			s.Parent = "hsn1"
			if err := e.attach(pod, s); err != nil {
				t.Fatal(err)
			}
		},
		spec: spec("10.150.3.7/16"),
		want: []string{"parent ifindex", "(hsn0)"},
	}, {
		name:  "ipvlan asked, macvlan there",
		setup: attached("10.150.3.7/16"),
		spec:  Spec{Parent: testParent, Mode: IPVLAN, Address: netip.MustParsePrefix("10.150.3.7/16")},
		want:  []string{"kind macvlan, want ipvlan"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			pod := testenv.NewNetNS(t)
			c.setup(t, e, pod)
			before := linkNames(t, nlIn(t, pod))
			err := e.attach(pod, c.spec)
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("Attach = %v, want ErrMismatch", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if after := linkNames(t, nlIn(t, pod)); !slices.Equal(after, before) {
				t.Errorf("pod's links %v became %v", before, after)
			}
		})
	}
}

func attached(addr string) func(*testing.T, *env, *os.File) {
	return func(t *testing.T, e *env, pod *os.File) {
		if err := e.attach(pod, spec(addr)); err != nil {
			t.Fatal(err)
		}
	}
}

// madeMacvlan makes hsn0 in the pod by hand, a macvlan of mode on the
// parent, created in the pod's namespace.
func madeMacvlan(mode netlink.MacvlanMode) func(*testing.T, *env, *os.File) {
	return func(t *testing.T, e *env, pod *os.File) {
		parent, err := e.hostNL.LinkByName(testParent)
		if err != nil {
			t.Fatal(err)
		}
		m := &netlink.Macvlan{Mode: mode, LinkAttrs: netlink.LinkAttrs{
			Name: DefaultName, ParentIndex: parent.Attrs().Index, Namespace: netlink.NsFd(int(pod.Fd())),
		}}
		if err := e.hostNL.LinkAdd(m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAttachParentMissing(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	s := spec("10.150.3.7/16")
	s.Parent = "hsn9"
	err := e.attach(pod, s)
	if !errors.Is(err, ErrParentNotFound) {
		t.Fatalf("Attach = %v, want ErrParentNotFound", err)
	}
	if !strings.Contains(err.Error(), "hsn netdev hsn9 not found") {
		t.Errorf("error %q does not say hsn netdev hsn9 not found", err)
	}
	if got := linkNames(t, nlIn(t, pod)); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("pod's links = %v, want [lo]", got)
	}
	if err := e.check(pod, s); !errors.Is(err, ErrParentNotFound) {
		t.Errorf("Check = %v, want ErrParentNotFound", err)
	}
}

// TestAttachUndoes: a failure after the child was made deletes it. The
// address is refused because IPv6 is disabled for new links in the pod's
// namespace (EACCES from the kernel), after the link exists.
func TestAttachUndoes(t *testing.T) {
	e := newEnv(t)
	hostBefore := e.hostLinks()
	pod := testenv.NewNetNS(t)
	err := testenv.InNetNS(pod, func() error {
		// net sysctls are those of the opening thread's namespace.
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
	})
	if err != nil {
		t.Fatalf("disable IPv6 in the pod: %v", err)
	}
	err = e.attach(pod, spec("fd00:150::7/64"))
	if !errors.Is(err, unix.EACCES) {
		t.Fatalf("Attach = %v, want the kernel's EACCES for the address", err)
	}
	if got := linkNames(t, nlIn(t, pod)); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("pod's links after a failed Attach = %v, want [lo]", got)
	}
	if got := e.hostLinks(); !slices.Equal(got, hostBefore) {
		t.Errorf("host's links = %v, were %v", got, hostBefore)
	}
}

func TestAttachInvalidSpec(t *testing.T) {
	pod := testenv.NewNetNS(t)
	// Refused before any netlink: no host namespace needed.
	_, err := Attach(pod, Spec{Parent: "hsn0"})
	if !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Attach without an address = %v, want ErrInvalidSpec", err)
	}
}

func TestDetach(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	podNL := nlIn(t, pod)
	if err := e.attach(pod, spec("10.150.3.7/16")); err != nil {
		t.Fatal(err)
	}
	// Detach needs nothing of the host: called from the test's thread.
	for i := range 2 {
		if err := Detach(pod, ""); err != nil {
			t.Fatalf("Detach #%d: %v", i+1, err)
		}
		if got := linkNames(t, podNL); !slices.Equal(got, []string{"lo"}) {
			t.Fatalf("pod's links after Detach #%d = %v, want [lo]", i+1, got)
		}
	}
}

func TestDetachGoneNamespace(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	if err := e.attach(pod, spec("10.150.3.7/16")); err != nil {
		t.Fatal(err)
	}
	if err := pod.Close(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]Namespace{
		"closed file":         pod,
		"descriptor not open": fdNS(1 << 20),
		"nil":                 nil,
	}
	for name, ns := range cases {
		if err := Detach(ns, DefaultName); err != nil {
			t.Errorf("%s: Detach = %v, want nil", name, err)
		}
	}
}

func TestDetachNotOurs(t *testing.T) {
	pod := testenv.NewNetNS(t)
	podNL := nlIn(t, pod)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: DefaultName}, PeerName: "other"}
	if err := podNL.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	err := Detach(pod, DefaultName)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "veth") {
		t.Errorf("Detach of a veth = %v, want ErrMismatch naming veth", err)
	}
	if _, ok := readLink(t, podNL, DefaultName, netlink.FAMILY_V4); !ok {
		t.Error("the veth was deleted")
	}
}

func TestDetachNotNetns(t *testing.T) {
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Detach(f, DefaultName); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Detach in a directory = %v, want EINVAL from setns", err)
	}
}

func TestCheck(t *testing.T) {
	e := newEnv(t)
	pod := testenv.NewNetNS(t)
	base := spec("10.150.3.7/16")
	if err := e.attach(pod, base); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*Spec)) Spec { s := base; f(&s); return s }
	cases := []struct {
		name string
		spec Spec
		want string // "" for success
	}{
		{"as attached", base, ""},
		{"other address", with(func(s *Spec) { s.Address = netip.MustParsePrefix("10.150.3.9/16") }), "address 10.150.3.7/16, want 10.150.3.9/16"},
		{"other prefix length", with(func(s *Spec) { s.Address = netip.MustParsePrefix("10.150.3.7/24") }), "want 10.150.3.7/24"},
		{"other MTU", with(func(s *Spec) { s.MTU = 9000 }), "MTU 1500, want 9000"},
		{"other kind", with(func(s *Spec) { s.Mode = IPVLAN }), "kind macvlan, want ipvlan"},
		{"absent", with(func(s *Spec) { s.Name = "hsn1" }), "no link hsn1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := e.check(pod, c.spec)
			if c.want == "" {
				if err != nil {
					t.Errorf("Check = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check = %v, want ErrMismatch naming %q", err, c.want)
			}
		})
	}

	podNL := nlIn(t, pod)
	l, err := podNL.LinkByName(DefaultName)
	if err == nil {
		err = podNL.LinkSetDown(l)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := e.check(pod, base); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "down, want up") {
		t.Errorf("Check of a down link = %v, want ErrMismatch naming down", err)
	}
}

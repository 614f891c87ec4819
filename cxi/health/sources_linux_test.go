//go:build linux

package health

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// These tests use the real sources on whatever machine runs them. On a
// machine without Slingshot NICs (CI, a laptop) the cxierr family and the
// hsn netdevs are missing, and the monitor must carry on without them.

func cxiDriverLoaded() bool {
	for _, mod := range []string{"cxi_ss1", "cxi_core"} {
		if _, err := os.Stat(filepath.Join("/sys/module", mod)); err == nil {
			return true
		}
	}
	return false
}

func TestRealSourcesDegradeCleanly(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	ticks := make(chan time.Time)
	log, logs := newLogger()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: ticks, Logger: log})
	stop := runMonitor(t, m)
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("event = %+v, want healthy from the sysfs tree", ev)
	}
	tick(t, ticks)
	tick(t, ticks)
	if rest := stop(); len(rest) != 0 {
		t.Fatalf("unexpected events: %+v", rest)
	}
	t.Logf("what the real sources did here:\n%s", logs)

	if !cxiDriverLoaded() {
		if logs.count("cxierr hardware error events unavailable, continuing without it") != 1 {
			t.Errorf("no cxi driver here, yet the cxierr source did not log once that it is unavailable")
		}
	}
	if _, err := os.Stat("/sys/class/net/hsn0"); errors.Is(err, fs.ErrNotExist) {
		// ethtool either failed to open, or fails for the missing hsn0:
		// either way it is logged once, not at every poll.
		if n := logs.count("ethtool unavailable, continuing without it"); n != 1 {
			t.Errorf("ethtool without hsn0 logged %d times, want once", n)
		}
	}
	if logs.count("stopped, continuing without it") != 0 {
		t.Errorf("a source stopped while running")
	}
}

// newNetns makes a network namespace of the test's own, so a test can
// change links without touching the machine's, and returns a handle to it.
// The thread that made it exits with its goroutine, still locked, so no
// goroutine runs in the namespace afterwards; the handle keeps it until
// the test's cleanup. It skips the test without the privilege.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	type made struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- made{err: err}
			return
		}
		ns, err := netns.Get()
		ch <- made{ns, err}
	}()
	m := <-ch
	if errors.Is(m.err, unix.EPERM) {
		testenv.RequirePrivileged(t, fmt.Sprintf("no privilege for a network namespace: %v", m.err))
	}
	if m.err != nil {
		t.Fatalf("new network namespace: %v", m.err)
	}
	t.Cleanup(func() { _ = m.ns.Close() })
	return m.ns
}

// netnsHandle returns a netlink handle for changing links in ns.
func netnsHandle(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle in the test namespace: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// setLink sets the named link of h's namespace up or down.
func setLink(t *testing.T, h *netlink.Handle, name string, up bool) {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	set := h.LinkSetDown
	if up {
		set = h.LinkSetUp
	}
	if err := set(l); err != nil {
		t.Fatalf("set %s up=%v: %v", name, up, err)
	}
}

// inNetns runs fn on a thread in ns, which exits with its goroutine after;
// sockets fn opens stay in ns.
func inNetns(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("enter the test namespace: %v", err)
	}
}

// TestRealLinkEventTriggersReread runs the real rtnetlink subscription in a
// private namespace: setting its lo up makes the kernel send RTM_NEWLINK,
// and the monitor must re-read at once, with no tick ever sent.
func TestRealLinkEventTriggersReread(t *testing.T) {
	checkGoroutines(t)
	ns := newNetns(t)
	h := netnsHandle(t, ns)
	tr := newSysfsTree(t)
	target := tr.target()
	target.NetDev = "lo"
	m := New(Config{Targets: []Target{target}, Ticks: make(chan time.Time),
		Sources: Sources{NoHWErrors: true, NoEthtool: true, subscribeLinks: subscribeLinksAt(&ns)}})
	runMonitor(t, m)
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("first event = %+v, want healthy", ev)
	}
	tr.set(operAttr, "down\n")
	setLink(t, h, "lo", true)
	if ev := nextEvent(t, m); ev.Healthy || ev.Reason != "netdev lo down" {
		t.Fatalf("after the link event: %+v, want unhealthy, netdev lo down", ev)
	}
}

// TestLinkSubscriptionReportsOverrunAsText shows why isOverrun matches the
// errno's text (issue 16, item 8): a real overrun ends the library's link
// subscription with an error that names ENOBUFS only in its text.
func TestLinkSubscriptionReportsOverrunAsText(t *testing.T) {
	checkGoroutines(t)
	ns := newNetns(t)
	h := netnsHandle(t, ns)
	done := make(chan struct{})
	var mu sync.Mutex
	var last error
	updates, err := subscribeLinksAt(&ns)(done, func(err error) { mu.Lock(); last = err; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(done)
		for range updates {
		}
	}()
	// Nobody reads updates: the kernel's queue for the socket fills up
	// (a few hundred kB) long before these many messages are sent.
	for i := range 2000 {
		setLink(t, h, "lo", i%2 == 0)
	}
	deadline := time.After(waitLimit)
	for open := true; open; {
		select {
		case _, open = <-updates:
		case <-deadline:
			t.Fatal("the subscription did not end after an overrun")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the subscription ended with: %v", last)
	if errors.Is(last, unix.ENOBUFS) {
		t.Errorf("the library now wraps the errno (%v): isOverrun could drop its text match", last)
	}
	if !isOverrun(last) {
		t.Errorf("isOverrun(%v) = false after a real overrun", last)
	}
}

func TestRealGenericNetlink(t *testing.T) {
	// Resolving a family and joining its group work here: nlctrl, the
	// generic-netlink controller, exists in every kernel.
	sub, err := openGenlSubscription("nlctrl", "notify")
	if err != nil {
		t.Fatalf("join nlctrl/notify: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := openGenlSubscription("nlctrl", "no-such-group"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing group: %v, want fs.ErrNotExist", err)
	}
	if _, err := openGenlSubscription("no-such-family", "notify"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing family: %v, want fs.ErrNotExist", err)
	}

	sub, err = openHWErrorSubscription()
	t.Logf("cxierr subscription here: %v", err)
	if err == nil {
		_ = sub.Close()
		return
	}
	if !cxiDriverLoaded() && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cxierr without the driver: %v, want fs.ErrNotExist", err)
	}
}

// memberships returns the multicast groups the netlink socket fd has joined
// (NETLINK_LIST_MEMBERSHIPS).
func memberships(t *testing.T, fd int) []int {
	t.Helper()
	words := make([]uint32, 8)
	size := uint32(4 * len(words))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_NETLINK, unix.NETLINK_LIST_MEMBERSHIPS,
		uintptr(unsafe.Pointer(&words[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		t.Fatalf("NETLINK_LIST_MEMBERSHIPS: %v", errno)
	}
	var groups []int
	for i, w := range words[:min(len(words), int(size/4))] {
		for bit := range 32 {
			if w&(1<<bit) != 0 {
				groups = append(groups, 32*i+bit+1)
			}
		}
	}
	return groups
}

// TestSubscribeJoinsNoGroupPast32 shows why joinGroup exists (issue 16,
// item 8): the library's nl.Subscribe joins groups through bind's 32-bit
// mask, and a generic-netlink group numbered past 32 is dropped without an
// error; NETLINK_ADD_MEMBERSHIP joins it.
func TestSubscribeJoinsNoGroupPast32(t *testing.T) {
	tests := []struct {
		group       uint32
		bySubscribe []int
		afterJoin   []int
	}{
		{group: 16, bySubscribe: []int{16}, afterJoin: []int{16}},
		{group: 33, bySubscribe: nil, afterJoin: []int{33}},
		{group: 40, bySubscribe: nil, afterJoin: []int{40}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.group), func(t *testing.T) {
			s, err := nl.Subscribe(unix.NETLINK_GENERIC, uint(tt.group))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := memberships(t, s.GetFd()); !slices.Equal(got, tt.bySubscribe) {
				t.Errorf("nl.Subscribe(%d) joined %v, want %v", tt.group, got, tt.bySubscribe)
			}
			if err := joinGroup(s, tt.group); err != nil {
				t.Fatal(err)
			}
			if got := memberships(t, s.GetFd()); !slices.Equal(got, tt.afterJoin) {
				t.Errorf("after joinGroup(%d): %v, want %v", tt.group, got, tt.afterJoin)
			}
		})
	}
}

// captureStdout returns what fn writes to os.Stdout.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	old := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = old }()
		fn()
	}()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newVeth makes a veth pair vA/vB, both down, in ns.
func newVeth(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = "vA"
	if err := netnsHandle(t, ns).LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "vB"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
}

func TestRealEthtool(t *testing.T) {
	ns := newNetns(t)
	newVeth(t, ns)
	var q ethtoolQuerier
	var err error
	inNetns(t, ns, func() { q, err = openEthtool() })
	if err != nil {
		t.Fatalf("open ethtool: %v", err)
	}
	defer func() { _ = q.Close() }()
	var info EthtoolInfo
	out := captureStdout(t, func() { info, err = q.Query("vA") })
	want := EthtoolInfo{Driver: "veth", DriverVersion: "1.0", SpeedMbps: 10000, Duplex: "full"}
	if err != nil || info != want {
		t.Errorf("Query(vA) = %+v, %v; want %+v", info, err, want)
	}
	if out != "" {
		t.Errorf("Query wrote to standard output: %q", out)
	}
	if _, err := q.Query("nosuchdev0"); err == nil {
		t.Error("query of a missing netdev succeeded")
	}
}

// TestGetLinkSettingsWritesToStdout shows why Query asks for ETHTOOL_GSET
// itself (issue 16, item 8): where the kernel's link-mode masks are longer
// than the library expects, its GetLinkSettings prints a warning on the
// process's standard output at every call, then falls back to GSET.
func TestGetLinkSettingsWritesToStdout(t *testing.T) {
	ns := newNetns(t)
	newVeth(t, ns)
	var e *ethtool.Ethtool
	var err error
	inNetns(t, ns, func() { e, err = ethtool.NewEthtool() })
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var ls *ethtool.LinkSettings
	out := captureStdout(t, func() { ls, err = e.GetLinkSettings("vA") })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GetLinkSettings: source %s, speed %d; wrote %q", ls.Source, ls.Speed, out)
	if ls.Source == ethtool.SourceGLinkSettings {
		t.Skip("this kernel's link-mode masks fit the library's: nothing to show here")
	}
	if out == "" {
		t.Error("GetLinkSettings fell back to GSET without writing to standard output; Query could use it")
	}
}

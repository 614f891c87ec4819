//go:build linux

package health

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// netnsThread is an OS thread in a network namespace of its own, so a test
// can change links without touching the machine's.
type netnsThread struct {
	sub  subscription
	up   chan struct{}
	done chan error
}

// startNetns makes a network namespace on a locked thread, opens the real
// link subscription in it, and waits for bringUp to set its "lo" up. The
// thread is never unlocked: it exits with its goroutine and takes the
// namespace along. It skips the test without the privilege to do so.
func startNetns(t *testing.T) *netnsThread {
	t.Helper()
	type opened struct {
		sub subscription
		err error
	}
	ready := make(chan opened, 1)
	n := &netnsThread{up: make(chan struct{}), done: make(chan error, 1)}
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit); <-n.done })
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- opened{err: err}
			n.done <- err
			return
		}
		sub, err := openLinkSubscription()
		ready <- opened{sub, err}
		if err != nil {
			n.done <- err
			return
		}
		select {
		case <-n.up:
			n.done <- setLinkUp("lo")
		case <-quit:
			n.done <- nil
		}
	}()
	o := <-ready
	if errors.Is(o.err, unix.EPERM) {
		t.Skipf("no privilege for a network namespace: %v", o.err)
	}
	if o.err != nil {
		t.Fatalf("open link subscription in a new namespace: %v", o.err)
	}
	n.sub = o.sub
	return n
}

// bringUp sets lo up in the namespace and waits for the ioctl to finish.
func (n *netnsThread) bringUp(t *testing.T) {
	t.Helper()
	close(n.up)
	select {
	case err := <-n.done:
		n.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("set lo up: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("namespace thread did not answer")
	}
}

// setLinkUp sets IFF_UP on a link of the calling thread's namespace.
func setLinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TestRealLinkEventTriggersReread runs the real rtnetlink subscription in a
// private namespace: setting its lo up makes the kernel send RTM_NEWLINK,
// and the monitor must re-read at once, with no tick ever sent.
func TestRealLinkEventTriggersReread(t *testing.T) {
	checkGoroutines(t)
	ns := startNetns(t)
	tr := newSysfsTree(t)
	target := tr.target()
	target.NetDev = "lo"
	log, logs := newLogger()
	m := New(Config{Targets: []Target{target}, Ticks: make(chan time.Time), Logger: log,
		Sources: Sources{NoHWErrors: true, NoEthtool: true,
			openLink: func() (subscription, error) { return ns.sub, nil }}})
	stop := runMonitor(t, m)
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("first event = %+v, want healthy", ev)
	}
	tr.set(operAttr, "down\n")
	ns.bringUp(t)
	if ev := nextEvent(t, m); ev.Healthy || ev.Reason != "netdev lo down" {
		t.Fatalf("after the link event: %+v, want unhealthy, netdev lo down", ev)
	}
	stop()
	if !strings.Contains(logs.String(), "link event") || !strings.Contains(logs.String(), "netdev=lo") {
		t.Errorf("the link event was not logged:\n%s", logs)
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

func TestRealEthtool(t *testing.T) {
	q, err := openEthtool()
	t.Logf("open ethtool: %v", err)
	if q == nil {
		t.Skip("ethtool unavailable here")
	}
	defer func() { _ = q.Close() }()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifi := range ifs {
		info, err := q.Query(ifi.Name)
		t.Logf("%s: %+v, %v", ifi.Name, info, err)
	}
	if _, err := q.Query("nosuchdev0"); err == nil {
		t.Error("query of a missing netdev succeeded")
	}
}

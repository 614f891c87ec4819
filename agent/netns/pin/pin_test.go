package pin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// childEnv turns the test binary into a stand-in agent: started in a
// mount and a network namespace of its own, it marks its network
// namespace, pins it in the directory the variable names, prints what it
// pinned and exits.
const childEnv = "SLINGSHOT_PIN_TEST_CHILD"

// ttlSysctl is a per-namespace setting, marked in a namespace to tell it
// from any other: a new namespace starts at the default, 64.
const (
	ttlSysctl = "/proc/sys/net/ipv4/ip_default_ttl"
	marker    = "123"
)

type childReport struct {
	Ino  uint32
	Prop Propagation
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		if err := child(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(dir string) error {
	if err := os.WriteFile(ttlSysctl, []byte(marker), 0); err != nil {
		return err
	}
	p, err := New(dir)
	if err != nil {
		return err
	}
	ino, err := p.PinPath("default/agent-child", "/proc/self/ns/net")
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(childReport{Ino: ino, Prop: p.Propagation()})
}

// newPins returns Pins over a directory of the test's, unmounted with
// every pin below it when the test ends.
func newPins(t *testing.T) *Pins {
	t.Helper()
	if os.Getuid() != 0 {
		testenv.RequirePrivileged(t, "needs root: bind mounts of namespaces")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	p, err := New(dir)
	if err != nil {
		testenv.RequirePrivileged(t, fmt.Sprintf("New: %v", err))
	}
	// Registered after TempDir, so run before its removal.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return p
}

// Issue 32: a pin made by an agent in a mount namespace of its own (its
// container) keeps the namespace after the agent, the only process in it,
// has exited and its mount namespace is gone with it; a later agent opens
// the same namespace, state and all, through the pin. The directory's
// mount is a peer of the child's copy, as the host's state directory is
// of a Bidirectional hostPath: Prepare binds it once, never again.
func TestPinOutlivesProcessAndMountNamespace(t *testing.T) {
	p := newPins(t)
	if !p.Propagation().Bound || p.Propagation().PeerGroup == 0 {
		t.Fatalf("Propagation() = %+v; want bound and shared", p.Propagation())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+p.Dir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output() // returns once the child has exited
	if err != nil {
		t.Fatalf("child agent: %v", err)
	}
	var rep childReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("child's report %q: %v", out, err)
	}
	if rep.Prop.Bound || rep.Prop.PeerGroup != p.Propagation().PeerGroup {
		t.Errorf("child's Propagation = %+v; want the parent's mount, peer group %d, not bound again", rep.Prop, p.Propagation().PeerGroup)
	}

	h, err := p.Open("default/agent-child")
	if err != nil {
		t.Fatalf("Open after the child exited: %v", err)
	}
	defer h.Close()
	if h.Inode() != rep.Ino {
		t.Fatalf("pin opens namespace %d, the child pinned %d", h.Inode(), rep.Ino)
	}
	if got := readIn(t, h, ttlSysctl); got != marker {
		t.Fatalf("%s in the pinned namespace = %q, want the child's %s: another namespace", ttlSysctl, got, marker)
	}
	// While held, its inode names it alone: a namespace made now is
	// given another.
	if later := fileInode(t, newNetNS(t)); later == rep.Ino {
		t.Fatalf("a namespace made after was given the pinned inode %d", later)
	}
	if ok, err := p.Holds("default/agent-child", rep.Ino); !ok || err != nil {
		t.Fatalf("Holds = %v, %v", ok, err)
	}
}

// Unpin lets the namespace go: with no process, descriptor or other
// mount holding it, the kernel frees it. A pin that held nothing would
// let it be freed at once; the nsid shows when it is.
func TestUnpinFreesNamespace(t *testing.T) {
	p := newPins(t)
	w := watchNsids(t)
	ns := newNetNS(t)
	id := w.assign(t, ns)
	ino, err := p.Pin("claim:u1", ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	// Held by the pin alone now: still there, under its number.
	h, err := p.Open("claim:u1")
	if err != nil || h.Inode() != ino {
		t.Fatalf("Open = %v, %v; want namespace %d", h.Inode(), err, ino)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Unpin("claim:u1"); err != nil {
		t.Fatal(err)
	}
	w.waitDeleted(t, id)
	if _, err := p.Open("claim:u1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open after Unpin = %v, want fs.ErrNotExist", err)
	}
	if err := p.Unpin("claim:u1"); err != nil {
		t.Fatalf("Unpin again: %v", err)
	}
	assertFiles(t, p)
}

// Pinning a holder's other namespace replaces its pin, leaves no
// temporary file, and lets the old namespace go.
func TestRepinAnotherNamespace(t *testing.T) {
	p := newPins(t)
	w := watchNsids(t)
	a, b := newNetNS(t), newNetNS(t)
	idA := w.assign(t, a)
	ia, err := p.Pin("default/web-0", a)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.Pin("default/web-0", a); err != nil || again != ia {
		t.Fatalf("Pin again = %d, %v; want %d", again, err, ia)
	}
	ib, err := p.Pin("default/web-0", b)
	if err != nil {
		t.Fatal(err)
	}
	if ia == ib {
		t.Fatalf("two live namespaces share inode %d", ia)
	}
	if got, err := p.Inode("default/web-0"); err != nil || got != ib {
		t.Fatalf("Inode = %d, %v; want %d", got, err, ib)
	}
	if held, _ := p.Holds("default/web-0", ia); held {
		t.Fatal("still holds the replaced namespace")
	}
	assertFiles(t, p, "default%2Fweb-0")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	w.waitDeleted(t, idA)
}

// A crash while a pin was being replaced leaves two files; the next
// Pins settles them: the pin on the holder's file wins, else the one on
// the temporary file, which had been the only hold left.
func TestRestartSettlesInterruptedReplacement(t *testing.T) {
	p := newPins(t)
	a, b := newNetNS(t), newNetNS(t)
	ia, ib := fileInode(t, a), fileInode(t, b)
	final := filepath.Join(p.Dir(), "x")
	tmp := final + tmpSuffix

	// Crashed after the new pin was made, before the old was dropped.
	if _, err := p.Pin("x", a); err != nil {
		t.Fatal(err)
	}
	rawPin(t, b, tmp)
	again := restart(t, p)
	if got, err := again.Inode("x"); err != nil || got != ia {
		t.Fatalf("old pin and new temporary: Inode = %d, %v; want the old %d", got, err, ia)
	}
	assertFiles(t, again, "x")

	// Crashed after the old was dropped, before the new was moved.
	if err := unmountAll(final); err != nil {
		t.Fatal(err)
	}
	rawPin(t, b, tmp)
	if got, err := restart(t, p).List(); err != nil || !slices.Equal(got, []string{"x"}) {
		t.Fatalf("List = %q, %v; want [x]", got, err)
	}
	assertFiles(t, again, "x")
	if got, err := again.Inode("x"); err != nil || got != ib {
		t.Fatalf("plain file and new temporary: Inode = %d, %v; want the new %d", got, err, ib)
	}
}

// A plain empty file, left by a crash between creating a pin's file and
// mounting on it, is reported as such, not as "no pin", and removed.
func TestStaleFile(t *testing.T) {
	p := newPins(t)
	if err := os.WriteFile(filepath.Join(p.Dir(), "claim%3Au2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := p.Open("claim:u2")
	if !errors.Is(err, ErrStale) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a plain file = %v; want ErrStale, not ErrNotExist", err)
	}
	assertFiles(t, p)
	if _, err := p.Open("claim:u2"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open after = %v, want fs.ErrNotExist", err)
	}
	// Stale ones are not listed either.
	if err := os.WriteFile(filepath.Join(p.Dir(), "claim%3Au2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := p.List(); err != nil || len(got) != 0 {
		t.Fatalf("List = %q, %v; want none", got, err)
	}
	assertFiles(t, p)
	// A file with content is none of ours: an error, and left alone.
	other := filepath.Join(p.Dir(), "claim%3Au3")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Open("claim:u3"); err == nil || errors.Is(err, ErrStale) {
		t.Fatalf("Open of a file with content = %v; want an error other than ErrStale", err)
	}
	assertFiles(t, p, "claim%3Au3")
}

// Restart: a new Pins over the directory (the agent's next run) lists and
// opens what the old one pinned, long names included, without binding
// the directory over the pins again.
func TestRestartListsAndOpens(t *testing.T) {
	p := newPins(t)
	long := strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253)
	want := map[string]uint32{}
	for _, holder := range []string{"claim:0b1c", long, "kube-system/dns-1"} {
		ino, err := p.Pin(holder, newNetNS(t))
		if err != nil {
			t.Fatal(err)
		}
		want[holder] = ino
	}
	again := restart(t, p)
	got, err := again.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"claim:0b1c", "kube-system/dns-1", long}) {
		t.Fatalf("List after restart = %q", got)
	}
	for holder, ino := range want {
		h, err := again.Open(holder)
		if err != nil || h.Inode() != ino {
			t.Fatalf("Open(%.20q...) = %d, %v; want %d", holder, h.Inode(), err, ino)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := again.Unpin(long); err != nil {
		t.Fatal(err)
	}
	// The long name's directory went with it.
	assertFiles(t, again, "claim%3A0b1c", "kube-system%2Fdns-1")
}

// Only a network namespace is pinned; nothing is created for another.
func TestPinRefusesOtherFiles(t *testing.T) {
	p := newPins(t)
	uts, err := os.Open("/proc/self/ns/uts")
	if err != nil {
		t.Fatal(err)
	}
	defer uts.Close()
	if _, err := p.Pin("a", uts); !errors.Is(err, ErrNotNetns) {
		t.Errorf("Pin of a UTS namespace = %v, want ErrNotNetns", err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PinPath("a", plain); !errors.Is(err, ErrNotNetns) {
		t.Errorf("PinPath of a plain file = %v, want ErrNotNetns", err)
	}
	if _, err := p.Pin("", newNetNS(t)); !errors.Is(err, ErrBadHolder) {
		t.Errorf("Pin for an empty holder = %v, want ErrBadHolder", err)
	}
	assertFiles(t, p)
}

// restart returns a new Pins over p's directory, as the agent's next run
// makes, and checks that it found the directory's mount in place.
func restart(t *testing.T, p *Pins) *Pins {
	t.Helper()
	again, err := New(p.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if again.Propagation().Bound || again.Propagation().PeerGroup != p.Propagation().PeerGroup {
		t.Fatalf("New again: Propagation = %+v; want the first mount's (%+v), not bound again", again.Propagation(), p.Propagation())
	}
	return again
}

// rawPin mounts ns on a new file at dst, as Pins would have before a crash.
func rawPin(t *testing.T, ns *os.File, dst string) {
	t.Helper()
	if err := os.WriteFile(dst, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
}

// assertFiles checks the files under p's directory are want, relative
// paths, sorted: no temporary or stale file left.
func assertFiles(t *testing.T, p *Pins, want ...string) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(p.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(p.Dir(), path)
			got = append(got, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("files in %s = %q, want %q", p.Dir(), got, want)
	}
}

// readIn reads the file at path on a thread in the namespace h holds.
func readIn(t *testing.T, h *Handle, path string) string {
	t.Helper()
	var got []byte
	err := testenv.OnThread(func() error {
		if err := unix.Setns(int(h.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		var err error
		got, err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(got))
}

// newNetNS returns a new network namespace that only the returned file
// holds, closed at cleanup. Unlike testenv.NewNetNS, the thread that made
// it goes back to ours: a locked goroutine that exits on the process's
// main thread does not end it but leaves it wedged, in the namespace
// made, which then is never freed.
func newNetNS(t *testing.T) *os.File {
	t.Helper()
	var f *os.File
	err := testenv.OnThread(func() error {
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		defer own.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		f, err = os.Open("/proc/thread-self/ns/net")
		if back := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); back != nil {
			return errors.Join(err, fmt.Errorf("back to our namespace: %w", back))
		}
		runtime.UnlockOSThread()
		return err
	})
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func fileInode(t *testing.T, f *os.File) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

// nsidWatch gives namespaces an nsid in a namespace of the test's and
// hears there when the kernel frees them: it reports each nsid gone
// (RTM_DELNSID) as it dismantles the namespace. An nsid holds no
// reference on the namespace.
type nsidWatch struct {
	h       *netlink.Handle
	events  *nl.NetlinkSocket
	next    int
	deleted map[int]bool
}

func watchNsids(t *testing.T) *nsidWatch {
	t.Helper()
	obs := vnetns.NsHandle(newNetNS(t).Fd())
	h, err := netlink.NewHandleAt(obs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	s, err := nl.SubscribeAt(obs, vnetns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_NSID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.SetReceiveTimeout(&unix.Timeval{Sec: 30}); err != nil {
		t.Fatal(err)
	}
	return &nsidWatch{h: h, events: s, next: 1, deleted: map[int]bool{}}
}

func (w *nsidWatch) assign(t *testing.T, ns *os.File) int {
	t.Helper()
	id := w.next
	w.next++
	if err := w.h.SetNetNsIdByFd(int(ns.Fd()), id); err != nil {
		t.Fatalf("nsid %d: %v", id, err)
	}
	return id
}

// waitDeleted reads the kernel's reports until it says nsid is gone, or
// fails the test after 30 s without a report.
func (w *nsidWatch) waitDeleted(t *testing.T, id int) {
	t.Helper()
	for !w.deleted[id] {
		msgs, _, err := w.events.Receive()
		if err != nil {
			t.Fatalf("waiting for the namespace of nsid %d to be freed: %v", id, err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.RTM_DELNSID || len(m.Data) < 4 {
				continue
			}
			attrs, err := nl.ParseRouteAttr(m.Data[4:]) // after the padded rtgenmsg
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range attrs {
				if a.Attr.Type == unix.NETNSA_NSID && len(a.Value) == 4 {
					w.deleted[int(int32(nl.NativeEndian().Uint32(a.Value)))] = true
				}
			}
		}
	}
}

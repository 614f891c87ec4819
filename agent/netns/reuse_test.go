package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// ttlSysctl is a per-namespace setting, marked in the pod's namespace to
// tell it from any other: a new namespace starts at the default, 64.
const ttlSysctl = "/proc/sys/net/ipv4/ip_default_ttl"

// Issue 15, item 5: a network namespace is named by an inode the kernel
// gives to the next namespace made once the namespace is freed. A Handle
// holds the namespace: after every process has left it and its bind mount
// is gone, it stays alive, the same namespace with its state, and its
// inode goes to no namespace made after; Close releases it, and then its
// inode does go to the next one, which shows that the check while it was
// held could have failed.
//
// The kernel gives every namespace, of any type, the lowest free number of
// one allocator (proc_alloc_inum, an IDA), which also numbers a network
// namespace's /proc/net entries right after it. So the numbers below the
// pod's are taken first, by UTS namespaces, which take one number each;
// from then on the next namespace made is given the pod's number as soon
// as it is free. Freed is seen as the kernel says it: a network namespace
// given an nsid in ours is reported gone by an RTM_DELNSID, and
// [nsidEvents.barrier] waits until a namespace released before it is
// freed, number included.
func TestHandleKeepsNamespaceInodeFromReuse(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.RequirePrivileged(t, "needs root: bind mounts, setns and nsids")
	}
	events := listenNsids(t)
	pid, stop, ok := startNetnsProcess(t)
	if !ok {
		testenv.RequirePrivileged(t, "no new network namespace possible here")
	}
	podPath := fmt.Sprintf("/proc/%d/ns/net", pid)
	const marker = "123"
	inNetnsPath(t, podPath, func() error { return os.WriteFile(ttlSysctl, []byte(marker), 0) })
	// The runtime's bind mount: CRI-O pins a namespace so, and names only
	// the path where it runs no infra process.
	pinned := bindMount(t, podPath)
	f := &fakeRuntime{}
	f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, pinned, true))
	c := CRI{Client: serveCRI(t, f), HostNetns: "/proc/self/ns/net"}
	h, err := c.Open(t.Context(), uid)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	ino := h.Inode()
	nsid := events.assign(t, h.f)
	takeUpTo(t, ino, true)

	// Every process leaves it, and its bind mount goes, as containerd
	// (pkg/netns) and CRI-O (nsmgr) remove it: detached, since a
	// descriptor opened through the mount keeps it busy.
	stop()
	if err := unix.Unmount(pinned, unix.MNT_DETACH); err != nil {
		t.Fatalf("unmount %s: %v", pinned, err)
	}
	if err := os.Remove(pinned); err != nil {
		t.Fatal(err)
	}
	made := append(events.barrier(t), takeUpTo(t, ino, false)...)
	if events.deleted[nsid] || slices.Contains(made, ino) {
		t.Fatalf("namespace %d was freed while its Handle is open (reported gone: %v; numbers given to new namespaces: %v)", ino, events.deleted[nsid], made)
	}
	inNetns(t, h.f, func() error {
		self, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil || self != fmt.Sprintf("net:[%d]", ino) {
			return fmt.Errorf("entered through the Handle: %s, %v; want net:[%d]", self, err, ino)
		}
		ttl, err := os.ReadFile(ttlSysctl)
		if err != nil || strings.TrimSpace(string(ttl)) != marker {
			return fmt.Errorf("entered through the Handle: %s %q, %v; want the pod's %s", ttlSysctl, ttl, err, marker)
		}
		return nil
	})

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	events.waitDeleted(t, nsid)
	made = append(events.barrier(t), takeUpTo(t, ino, false)...)
	if !slices.Contains(made, ino) {
		t.Fatalf("after Close no new namespace was given %d (numbers given: %v): this kernel does not give the lowest free number first, so the check while held proved nothing", ino, made)
	}
}

// takeUpTo makes UTS namespaces, each taking one number, until one is
// given ino or more, and returns the numbers given: every number below
// ino is then taken, and ino too if it was free. With keep the namespaces
// are held until the test ends, else released before it returns.
func takeUpTo(t *testing.T, ino uint32, keep bool) []uint32 {
	t.Helper()
	const maxNamespaces = 1024
	var held []*os.File
	release := func() {
		for _, f := range held {
			_ = f.Close()
		}
	}
	if keep {
		t.Cleanup(release)
	} else {
		defer release()
	}
	var given []uint32
	for range maxNamespaces {
		f := newNamespace(t, unix.CLONE_NEWUTS, "uts")
		held = append(held, f)
		given = append(given, fileInode(t, f))
		if given[len(given)-1] >= ino {
			return given
		}
	}
	t.Fatalf("%d new namespaces, none given %d or more", maxNamespaces, ino)
	return nil
}

func fileInode(t *testing.T, f *os.File) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

// newNamespace makes a namespace of the given type (a CLONE_NEW* flag and
// its name under /proc/<tid>/ns) that only the returned file holds.
func newNamespace(t *testing.T, flag int, name string) *os.File {
	t.Helper()
	var f *os.File
	onLockedThread(t, flag, name, func() error {
		if err := unix.Unshare(flag); err != nil {
			return fmt.Errorf("unshare a %s namespace: %w", name, err)
		}
		var err error
		f, err = os.Open("/proc/thread-self/ns/" + name)
		return err
	})
	return f
}

// inNetns runs fn on a thread in the network namespace ns is open on.
func inNetns(t *testing.T, ns *os.File, fn func() error) {
	t.Helper()
	onLockedThread(t, unix.CLONE_NEWNET, "net", func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", ns.Name(), err)
		}
		return fn()
	})
}

// inNetnsPath runs fn on a thread in the network namespace at p.
func inNetnsPath(t *testing.T, p string, fn func() error) {
	t.Helper()
	ns, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	inNetns(t, ns, fn)
}

// onLockedThread runs fn on a goroutine locked to its thread, which fn may
// move to another namespace of the given type: the thread is moved back
// to ours after, or, where that fails, ends with the goroutine.
func onLockedThread(t *testing.T, flag int, name string, fn func() error) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer own.Close()
		err = fn()
		if back := unix.Setns(int(own.Fd()), flag); back != nil {
			done <- errors.Join(err, fmt.Errorf("back to our %s namespace: %w", name, back))
			return // still locked: the thread ends with the goroutine
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// bindMount bind-mounts the namespace file src on a file of the test's
// and returns its path; the test's cleanup unmounts it if it is left.
func bindMount(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(dst, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		testenv.RequirePrivileged(t, fmt.Sprintf("bind mount %s: %v", src, err))
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	return dst
}

// nsidEvents gives namespaces nsids in ours and hears when the kernel
// reports them gone (RTM_DELNSID, group RTNLGRP_NSID).
type nsidEvents struct {
	listen  *os.File // a netlink socket in the group
	request int      // a netlink socket for requests
	deleted map[int32]bool
	next    int32
}

func listenNsids(t *testing.T) *nsidEvents {
	t.Helper()
	e := &nsidEvents{deleted: map[int32]bool{}, next: rand.Int32N(1<<30) + 1<<20}
	e.request = netlinkSocket(t, 0)
	t.Cleanup(func() { _ = unix.Close(e.request) })
	lfd := netlinkSocket(t, 1<<(unix.RTNLGRP_NSID-1))
	// Non-blocking before os.NewFile, so that reads honour a deadline.
	if err := unix.SetNonblock(lfd, true); err != nil {
		_ = unix.Close(lfd)
		t.Fatal(err)
	}
	e.listen = os.NewFile(uintptr(lfd), "rtnetlink-nsid")
	t.Cleanup(func() { _ = e.listen.Close() })
	return e
}

// netlinkSocket returns a bound rtnetlink socket in the given groups; the
// caller closes it.
func netlinkSocket(t *testing.T, groups uint32) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		_ = unix.Close(fd)
		t.Fatal(err)
	}
	return fd
}

// assign gives the namespace ns is open on an nsid of its own in ours,
// one no other namespace had in this test, and returns it. An nsid holds
// no reference on the namespace.
func (e *nsidEvents) assign(t *testing.T, ns *os.File) int32 {
	t.Helper()
	for range 8 {
		id := e.next
		e.next++
		err := e.newNsid(id, int(ns.Fd()))
		if err == nil {
			return id
		}
		if !errors.Is(err, unix.EEXIST) {
			t.Fatalf("RTM_NEWNSID %d: %v", id, err)
		}
	}
	t.Fatal("RTM_NEWNSID: every nsid tried is taken")
	return 0
}

// newNsid sends RTM_NEWNSID {NETNSA_NSID: id, NETNSA_FD: fd} and returns
// the kernel's answer.
func (e *nsidEvents) newNsid(id int32, fd int) error {
	const hdr, body, attr = unix.SizeofNlMsghdr, 4, 8 // rtgenmsg padded
	msg := make([]byte, hdr+body+2*attr)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_NEWNSID)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], uint32(id)) // sequence number
	msg[hdr] = unix.AF_UNSPEC
	for i, a := range []struct {
		typ uint16
		val uint32
	}{{unix.NETNSA_NSID, uint32(id)}, {unix.NETNSA_FD, uint32(fd)}} {
		off := hdr + body + i*attr
		ne.PutUint16(msg[off:], attr)
		ne.PutUint16(msg[off+2:], a.typ)
		ne.PutUint32(msg[off+4:], a.val)
	}
	if err := unix.Sendto(e.request, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	// rtnetlink answers before sendto returns: nothing to wait for.
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(e.request, buf, unix.MSG_DONTWAIT)
	if err != nil {
		return fmt.Errorf("receive the answer: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if errno := -int32(ne.Uint32(m.Data)); errno != 0 {
				return syscall.Errno(errno)
			}
			return nil
		}
	}
	return fmt.Errorf("no answer among %d messages", len(msgs))
}

// waitDeleted reads the kernel's reports until it says nsid is gone.
func (e *nsidEvents) waitDeleted(t *testing.T, nsid int32) {
	t.Helper()
	if err := e.listen.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for !e.deleted[nsid] {
		n, err := e.listen.Read(buf)
		if err != nil {
			t.Fatalf("waiting for the namespace of nsid %d to be freed: %v", nsid, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if id, ok := delNsid(m); ok {
				e.deleted[id] = true
			}
		}
	}
}

// barrier returns once every namespace released before it was called is
// freed, its inode free, and returns the inodes of the sentinel
// namespaces it made to know that. The kernel cleans released namespaces
// up in batches, one after the other (its netns workqueue is ordered); a
// batch reports its namespaces gone (RTM_DELNSID) as it begins, and frees
// their inodes then or, in kernels that defer it (net_complete_free), at
// the end of the next batch. Each sentinel is released once the one
// before is reported gone, so it is cleaned up in a later batch: a
// namespace released before the barrier is in the first sentinel's batch
// or an earlier one, freed by the end of the second's, which has ended
// once the third is reported gone.
func (e *nsidEvents) barrier(t *testing.T) []uint32 {
	t.Helper()
	var made []uint32
	for range 3 {
		s := newNamespace(t, unix.CLONE_NEWNET, "net")
		made = append(made, fileInode(t, s))
		id := e.assign(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		e.waitDeleted(t, id)
	}
	return made
}

// delNsid returns the nsid an RTM_DELNSID message reports gone.
func delNsid(m syscall.NetlinkMessage) (int32, bool) {
	if m.Header.Type != unix.RTM_DELNSID || len(m.Data) < 4 {
		return 0, false
	}
	ne := binary.NativeEndian
	for b := m.Data[4:]; len(b) >= 4; { // after the padded rtgenmsg
		l := int(ne.Uint16(b))
		if l < 4 || l > len(b) {
			return 0, false
		}
		if ne.Uint16(b[2:]) == unix.NETNSA_NSID && l >= 8 {
			return int32(ne.Uint32(b[4:])), true
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return 0, false
}

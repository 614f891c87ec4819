package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNsInode(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	self := inodeOf(t, "/proc/self/ns/net")
	tests := []struct {
		path    string
		wantNet bool
		want    uint32
		wantErr error
	}{
		{"/proc/self/ns/net", true, self, nil},
		{"/proc/self/ns/uts", false, inodeOf(t, "/proc/self/ns/uts"), nil},
		{"/proc/self/ns/uts", true, 0, ErrNotNetns},
		{plain, false, 0, ErrNotNetns},
		{"/dev/null", false, 0, ErrNotNetns},
		{"/proc/self", false, 0, ErrNotNetns},
		{plain + "-gone", true, 0, fs.ErrNotExist},
	}
	for _, tt := range tests {
		got, err := nsInode(tt.path, tt.wantNet)
		if got != tt.want || (tt.wantErr == nil) != (err == nil) || !errors.Is(err, tt.wantErr) {
			t.Errorf("nsInode(%s, %v) = %d, %v; want %d, %v", tt.path, tt.wantNet, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("run/netns")
	mk("var/lib")
	link("/run", "var/run")             // Debian, Ubuntu
	link("../../run", "var/lib/run")    // relative
	link("../../../../../../run", "up") // climbs above the root: stays in it
	link("/loop/a", "loop")             // a loop
	if err := os.WriteFile(filepath.Join(root, "run/netns/cni-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "run/netns/cni-1")
	for _, p := range []string{"/var/run/netns/cni-1", "/run/netns/cni-1", "/var/lib/run/netns/cni-1", "/up/netns/cni-1", "/../../run/./netns/cni-1"} {
		if got, err := ResolveInRoot(root, p); err != nil || got != want {
			t.Errorf("ResolveInRoot(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if _, err := ResolveInRoot(root, "/var/run/netns/gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ResolveInRoot of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := ResolveInRoot(root, "/loop/x"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("ResolveInRoot of a loop = %v, want ELOOP", err)
	}
	for _, r := range []string{"", "/"} {
		if got, err := ResolveInRoot(r, "/var/run/x"); err != nil || got != "/var/run/x" {
			t.Errorf("ResolveInRoot(%q) = %q, %v; want the path as it is", r, got, err)
		}
	}
}

// fdInode returns the inode of the file h's descriptor is open on, read
// through /proc/self/fd: what the kernel holds, not what h recorded.
func fdInode(t *testing.T, h *Handle) uint32 {
	t.Helper()
	return inodeOf(t, fmt.Sprintf("/proc/self/fd/%d", h.f.Fd()))
}

func TestHandle(t *testing.T) {
	h, err := openNs("/proc/self/ns/net", true)
	if err != nil {
		t.Fatal(err)
	}
	want := inodeOf(t, "/proc/self/ns/net")
	if h.Inode() != want || fdInode(t, h) != want {
		t.Fatalf("Handle of %d: Inode %d, descriptor of %d", want, h.Inode(), fdInode(t, h))
	}
	fd := int(h.f.Fd())
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x, %v: not close-on-exec", flags, err)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("file flags %#x, %v: want read-only and blocking", fl, err)
	}
	if typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || typ != unix.CLONE_NEWNET {
		t.Errorf("NS_GET_NSTYPE = %#x, %v", typ, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = h.Close() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Close, concurrently: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	if h.f.Fd() != ^uintptr(0) {
		t.Fatal("the descriptor is still open after Close")
	}
	if h.Inode() != want {
		t.Fatalf("Inode after Close = %d, want the one held, %d", h.Inode(), want)
	}
	var none *Handle
	if none.Inode() != 0 || none.Close() != nil || (&Handle{}).Close() != nil {
		t.Fatal("a nil or zero Handle is not an empty one")
	}
}

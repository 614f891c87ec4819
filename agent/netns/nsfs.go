package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Handle is an open descriptor of a network namespace. While it is open
// the kernel keeps the namespace, however many processes have left it and
// whatever bind mounts of it are gone, so its inode cannot be given to
// another namespace: a CXI service whose member is [Handle.Inode] admits
// that namespace and no later one, for as long as the Handle stays open.
// The agent keeps it from the moment the namespace is resolved until the
// service is destroyed, then closes it.
//
// A Handle opened through a runtime's bind mount of the namespace keeps
// that mount busy: the runtimes detach it (containerd's pkg/netns and
// CRI-O's nsmgr unmount with MNT_DETACH), which an open Handle does not
// hinder, but a plain umount fails with EBUSY until the Handle is closed.
//
// A Handle is safe for concurrent use.
type Handle struct {
	f   *os.File
	ino uint32
	// labels and annotations are the pod's as its runtime reported them
	// with the sandbox (CRI); nil where the namespace was found otherwise.
	labels, annotations map[string]string
}

// PodMeta returns the pod's labels and annotations as the container
// runtime reported them with its sandbox, or nils where the namespace was
// found without the runtime (/proc). They are the kubelet's copy of the
// pod's, set when the sandbox was made; the agent reads from them only
// what decides nothing about isolation alone (see engine.ShareKey).
func (h *Handle) PodMeta() (labels, annotations map[string]string) {
	if h == nil {
		return nil, nil
	}
	return h.labels, h.annotations
}

// Inode returns the namespace's inode, read by fstat on the held
// descriptor when it was opened: the inode of the namespace held, which
// cannot change while it is held. After [Handle.Close] the number only
// names what was held; the kernel may give it to another namespace.
// A nil Handle holds nothing and has inode 0.
func (h *Handle) Inode() uint32 {
	if h == nil {
		return 0
	}
	return h.ino
}

// Fd returns the held descriptor, for calls that act in the namespace
// (package hsnlink), or ^uintptr(0) once closed, as [os.File.Fd] does. A
// nil Handle holds none.
func (h *Handle) Fd() uintptr {
	if h == nil || h.f == nil {
		return ^uintptr(0)
	}
	return h.f.Fd()
}

// Close releases the namespace. It is idempotent: a second Close, or one
// of a nil Handle, returns nil.
func (h *Handle) Close() error {
	if h == nil || h.f == nil {
		return nil
	}
	if err := h.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("close network namespace %d: %w", h.ino, err)
	}
	return nil
}

// nsInode returns the inode of the namespace file at p, as [openNs] reads
// it, and holds nothing: the number may name another namespace as soon as
// it returns. For the host's namespace, which lives as long as the host.
func nsInode(p string, wantNet bool) (uint32, error) {
	h, err := openNs(p, wantNet)
	if err != nil {
		return 0, err
	}
	ino := h.Inode()
	if err := h.Close(); err != nil {
		return 0, err
	}
	return ino, nil
}

// openNs opens the namespace file at p, a /proc/<pid>/ns/* link or a bind
// mount of one, and returns a Handle that holds it. It returns an error
// wrapping [ErrNotNetns] when p is not an nsfs inode or, with wantNet, not
// a network namespace. Every check is made on the descriptor returned.
func openNs(p string, wantNet bool) (*Handle, error) {
	// O_PATH first: a path that names a device or a FIFO is looked at,
	// never opened.
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	var first unix.Stat_t
	err = checkNsfs(pfd, p, &first)
	unix.Close(pfd)
	if err != nil {
		return nil, err
	}
	// The namespace type needs an ioctl, which an O_PATH descriptor
	// refuses, and the hold needs a descriptor that stays: open it again,
	// and check again on the one kept.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	// Blocking again, so that os.NewFile does not try to poll an nsfs
	// file: O_NONBLOCK was there for the open alone.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: p, Err: err}
	}
	h := &Handle{f: os.NewFile(uintptr(fd), p)}
	var st unix.Stat_t
	if err := checkNsfs(fd, p, &st); err != nil {
		_ = h.Close()
		return nil, err
	}
	if st.Dev != first.Dev || st.Ino != first.Ino {
		_ = h.Close()
		return nil, fmt.Errorf("%s changed while it was read", p)
	}
	h.ino = uint32(st.Ino)
	if wantNet {
		typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
		if err != nil {
			_ = h.Close()
			return nil, &fs.PathError{Op: "NS_GET_NSTYPE", Path: p, Err: err}
		}
		if typ != unix.CLONE_NEWNET {
			_ = h.Close()
			return nil, fmt.Errorf("%w: %s is a namespace of type %#x", ErrNotNetns, p, typ)
		}
	}
	return h, nil
}

// checkNsfs fills st with fd's status and returns an error wrapping
// [ErrNotNetns] unless fd is an nsfs inode whose number fits a uint32.
func checkNsfs(fd int, p string, st *unix.Stat_t) error {
	if err := unix.Fstat(fd, st); err != nil {
		return &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return &fs.PathError{Op: "statfs", Path: p, Err: err}
	}
	if sfs.Type != unix.NSFS_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s is not an nsfs inode (file system magic %#x, mode %#o)", ErrNotNetns, p, sfs.Type, st.Mode)
	}
	if st.Ino == 0 || st.Ino > math.MaxUint32 {
		return fmt.Errorf("%w: %s: inode %d out of range", ErrNotNetns, p, st.Ino)
	}
	return nil
}

// maxSymlinks bounds the symbolic links followed in one path, as the
// kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// ResolveInRoot returns the path under root of the host path p, following
// symbolic links as if root were "/": an absolute link target starts again
// at root, and ".." never climbs above it. The host's "/var/run" is often
// the link "/var/run -> /run", which the kernel, walking
// "<root>/var/run/...", would resolve in the agent's own root instead.
//
// With root "" or "/" p is returned as it is, for the kernel to resolve.
// Otherwise a /proc/<pid>/ns/net magic link in p does not resolve, since
// its target reads "net:[<inode>]"; runtimes name bind mounts, no links.
func ResolveInRoot(root, p string) (string, error) {
	if root == "" || root == "/" {
		return p, nil
	}
	resolved := "" // "" or "/a/b", relative to root, free of links
	rest := p
	links := 0
	for rest != "" {
		var part string
		part, rest, _ = strings.Cut(strings.TrimLeft(rest, "/"), "/")
		switch part {
		case "", ".":
			continue
		case "..":
			if resolved = path.Dir(resolved); resolved == "/" || resolved == "." {
				resolved = ""
			}
			continue
		}
		next := resolved + "/" + part
		fi, err := os.Lstat(root + next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(root + next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = ""
		}
		if rest != "" {
			target += "/" + rest
		}
		rest = target
	}
	return root + resolved, nil
}

// isSocket reports whether p names a unix socket.
func isSocket(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&fs.ModeSocket != 0
}

package netns

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsInode returns the inode of the namespace file at p: a /proc/<pid>/ns/*
// link or a bind mount of one. It returns an error wrapping [ErrNotNetns]
// when p is not an nsfs inode or, with wantNet, not a network namespace.
func nsInode(p string, wantNet bool) (uint32, error) {
	// O_PATH first: a path that names a device or a FIFO is looked at,
	// never opened.
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: p, Err: err}
	}
	if sfs.Type != unix.NSFS_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s is not an nsfs inode (file system magic %#x, mode %#o)", ErrNotNetns, p, sfs.Type, st.Mode)
	}
	if st.Ino == 0 || st.Ino > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %s: inode %d out of range", ErrNotNetns, p, st.Ino)
	}
	if wantNet {
		// The namespace type needs an ioctl, which an O_PATH descriptor
		// refuses: open it again and make sure it is the same inode.
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != nil {
			return 0, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		defer unix.Close(fd)
		var again unix.Stat_t
		if err := unix.Fstat(fd, &again); err != nil {
			return 0, &fs.PathError{Op: "stat", Path: p, Err: err}
		}
		if again.Dev != st.Dev || again.Ino != st.Ino {
			return 0, fmt.Errorf("%s changed while it was read", p)
		}
		typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
		if err != nil {
			return 0, &fs.PathError{Op: "NS_GET_NSTYPE", Path: p, Err: err}
		}
		if typ != unix.CLONE_NEWNET {
			return 0, fmt.Errorf("%w: %s is a namespace of type %#x", ErrNotNetns, p, typ)
		}
	}
	return uint32(st.Ino), nil
}

// maxSymlinks bounds the symbolic links followed in one path, as the
// kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// resolveInRoot returns the path under root of the host path p, following
// symbolic links as if root were "/": an absolute link target starts again
// at root, and ".." never climbs above it. The host's "/var/run" is often
// the link "/var/run -> /run", which the kernel, walking
// "<root>/var/run/...", would resolve in the agent's own root instead.
//
// With root "" or "/" p is returned as it is, for the kernel to resolve.
// Otherwise a /proc/<pid>/ns/net magic link in p does not resolve, since
// its target reads "net:[<inode>]"; runtimes name bind mounts, no links.
func resolveInRoot(root, p string) (string, error) {
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

package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Errors of the finders' Open and Netns methods.
var (
	// ErrNotFound: the pod has no ready sandbox, or no process of it runs.
	ErrNotFound = errors.New("pod network namespace not found")
	// ErrHostNetwork: the pod shares the host's network namespace, so a
	// netns member would admit every host process.
	ErrHostNetwork = errors.New("pod uses the host network namespace")
	// ErrAmbiguous: processes of the pod are in different namespaces.
	ErrAmbiguous = errors.New("pod processes disagree on the network namespace")
	// ErrNotNetns: what the runtime named is not a network namespace (not
	// an nsfs inode of type net).
	ErrNotNetns = errors.New("not a network namespace")
	// ErrHostUnknown: the host's own network namespace could not be read,
	// so a pod's namespace cannot be told apart from it. Refused, since a
	// host-network pod would otherwise become a member that admits every
	// host process.
	ErrHostUnknown = errors.New("host network namespace unreadable")
)

// Proc resolves network namespaces from a proc filesystem: the processes
// whose cgroup names the pod UID. It needs a running process of the pod, so
// it cannot find the namespace of a CRI-O pod whose infra container was
// dropped before the pod's first container starts; [CRI] can.
type Proc struct {
	// Root is the proc mount, "/proc" on a host; the agent's container
	// mounts the host's /proc (hostPID) for this.
	Root string
}

// Open returns a [Handle] on the network namespace of the pod with the
// given UID, opened from /proc/<pid>/ns/net of a process of the pod. The
// caller closes it. It returns an error wrapping [ErrNotFound],
// [ErrHostNetwork], [ErrAmbiguous], [ErrHostUnknown] (the host's namespace
// unreadable) or [ErrNotNetns], or ctx's error if ctx ends during the walk.
func (p Proc) Open(ctx context.Context, podUID string) (*Handle, error) {
	if podUID == "" || strings.ContainsAny(podUID, "/\n") {
		return nil, fmt.Errorf("%w: bad pod UID %q", ErrNotFound, podUID)
	}
	h, err := p.openPod(ctx, podUID)
	if err != nil {
		return nil, err
	}
	// Refused when unreadable, as the CRI finder does: a namespace that
	// cannot be compared with the host's may be the host's.
	host, err := nsInode(filepath.Join(p.Root, "1", "ns", "net"), false)
	if err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("%w: %w", ErrHostUnknown, err)
	}
	if host == h.Inode() {
		_ = h.Close()
		return nil, fmt.Errorf("%w: pod %s", ErrHostNetwork, podUID)
	}
	return h, nil
}

// Netns returns the network namespace inode of the pod with the given UID,
// with the errors of [Proc.Open]. It holds nothing: once it returns, the
// namespace may be freed and its inode given to another one. Use
// [Proc.Open] and keep the Handle for as long as the inode is used.
func (p Proc) Netns(ctx context.Context, podUID string) (uint32, error) {
	return inodeOnly(p.Open(ctx, podUID))
}

// openPod opens the network namespace of the processes in a cgroup of the
// pod, and makes sure they all share it.
func (p Proc) openPod(ctx context.Context, podUID string) (*Handle, error) {
	needles := []string{"pod" + podUID, "pod" + strings.ReplaceAll(podUID, "-", "_")}
	entries, err := os.ReadDir(p.Root)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.Root, err)
	}
	var found *Handle
	fail := func(err error) (*Handle, error) {
		if found != nil {
			_ = found.Close()
		}
		return nil, err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(p.Root, e.Name(), "cgroup"))
		if err != nil || !cgroupNamesPod(string(cg), needles) {
			continue // processes come and go while we look
		}
		// Opened, not read as a link: the Handle holds what was compared.
		h, err := openNs(filepath.Join(p.Root, e.Name(), "ns", "net"), true)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // it exited, or is a zombie
		case err != nil:
			return fail(fmt.Errorf("netns of pid %s: %w", e.Name(), err))
		case found == nil:
			found = h
			continue
		}
		other := h.Inode()
		_ = h.Close()
		if other != found.Inode() {
			return fail(fmt.Errorf("%w: %d and %d", ErrAmbiguous, found.Inode(), other))
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no process in a cgroup of pod %s under %s", ErrNotFound, podUID, p.Root)
	}
	return found, nil
}

// OpenInode returns a [Handle] on the live network namespace whose inode
// is ino, opened from /proc/<pid>/ns/net of a process in it under procRoot:
// for an agent that restarts with only the inode it recorded. It returns
// an error wrapping [ErrNotFound] when no process is in that namespace (a
// namespace only a bind mount keeps is not found), or ctx's error.
//
// A Handle from it holds the namespace from now on, not since the inode
// was recorded: while nothing held it, the pod's namespace may have been
// freed and the inode given to another. The caller checks that the holder
// is the pod's, by [Proc.Open] or [CRI.Open] of the pod's UID and an equal
// inode. It is never the host's: the host's namespace lives as long as the
// host, so its inode is never given to another namespace, and a recorded
// inode was refused before it was recorded if it was the host's.
func OpenInode(ctx context.Context, procRoot string, ino uint32) (*Handle, error) {
	if ino == 0 {
		return nil, fmt.Errorf("%w: inode 0", ErrNotFound)
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procRoot, err)
	}
	p := Proc{Root: procRoot}
	var openErr error // why a process in it could not be opened
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		// The link is read first, which opens nothing: most processes
		// are in other namespaces.
		if got, err := p.inode(e.Name()); err != nil || got != ino {
			continue
		}
		h, err := openNs(filepath.Join(procRoot, e.Name(), "ns", "net"), true)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // else it exited
				openErr = err
			}
			continue
		}
		if h.Inode() == ino {
			return h, nil
		}
		_ = h.Close() // it moved, or its pid was reused meanwhile
	}
	if openErr != nil {
		return nil, fmt.Errorf("%w: network namespace %d under %s: %w", ErrNotFound, ino, procRoot, openErr)
	}
	return nil, fmt.Errorf("%w: no process in network namespace %d under %s", ErrNotFound, ino, procRoot)
}

func (p Proc) inode(pid string) (uint32, error) {
	link := filepath.Join(p.Root, pid, "ns", "net")
	target, err := os.Readlink(link)
	if err != nil {
		return 0, fmt.Errorf("read netns of pid %s: %w", pid, err)
	}
	ino, err := ParseNetnsLink(target)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", link, err)
	}
	return ino, nil
}

// cgroupNamesPod reports whether a /proc/<pid>/cgroup file places the
// process in a cgroup of the pod.
func cgroupNamesPod(cgroup string, needles []string) bool {
	for line := range strings.Lines(cgroup) {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for seg := range strings.SplitSeq(parts[2], "/") {
			for _, n := range needles {
				// cgroupfs: the segment is exactly pod<uid>; systemd: it
				// ends in -pod<uid>.slice.
				if seg == n || strings.HasSuffix(seg, "-"+n+".slice") {
					return true
				}
			}
		}
	}
	return false
}

// ParseNetnsLink parses the target of a /proc/<pid>/ns/net link,
// "net:[4026531840]", into the inode.
func ParseNetnsLink(target string) (uint32, error) {
	rest, ok := strings.CutPrefix(target, "net:[")
	if !ok {
		return 0, fmt.Errorf("netns link %q: not net:[inode]", target)
	}
	num, ok := strings.CutSuffix(rest, "]")
	if !ok {
		return 0, fmt.Errorf("netns link %q: not net:[inode]", target)
	}
	ino, err := strconv.ParseUint(num, 10, 32)
	if err != nil || ino == 0 {
		return 0, fmt.Errorf("netns link %q: bad inode", target)
	}
	return uint32(ino), nil
}

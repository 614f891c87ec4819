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

// Errors of the finders' Open methods.
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

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

// Errors of the finders' Netns methods.
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

// Netns returns the network namespace inode of the pod with the given UID.
// It returns an error wrapping [ErrNotFound], [ErrHostNetwork] or
// [ErrAmbiguous], or ctx's error if ctx ends during the walk.
func (p Proc) Netns(ctx context.Context, podUID string) (uint32, error) {
	if podUID == "" || strings.ContainsAny(podUID, "/\n") {
		return 0, fmt.Errorf("%w: bad pod UID %q", ErrNotFound, podUID)
	}
	needles := []string{"pod" + podUID, "pod" + strings.ReplaceAll(podUID, "-", "_")}
	entries, err := os.ReadDir(p.Root)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p.Root, err)
	}
	var found uint32
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(p.Root, e.Name(), "cgroup"))
		if err != nil || !cgroupNamesPod(string(cg), needles) {
			continue // processes come and go while we look
		}
		ino, err := p.inode(e.Name())
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, err
		}
		if found != 0 && ino != found {
			return 0, fmt.Errorf("%w: %d and %d", ErrAmbiguous, found, ino)
		}
		found = ino
	}
	if found == 0 {
		return 0, fmt.Errorf("%w: no process in a cgroup of pod %s under %s", ErrNotFound, podUID, p.Root)
	}
	// Refused when unreadable, as the CRI finder does: a namespace that
	// cannot be compared with the host's may be the host's.
	host, err := p.inode("1")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrHostUnknown, err)
	}
	if host == found {
		return 0, fmt.Errorf("%w: pod %s", ErrHostNetwork, podUID)
	}
	return found, nil
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

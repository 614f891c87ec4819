package pin

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Propagation says how the pins' directory is mounted, as
// /proc/self/mountinfo tells it after [Prepare].
type Propagation struct {
	// Bound reports whether Prepare bound the directory on itself
	// because it was no mount point (on a host, the first time).
	Bound bool
	// PeerGroup is the directory's mount's shared peer group: pins made
	// in it appear in every mount of the group, in whatever mount
	// namespace. Never 0 after Prepare.
	PeerGroup int
	// Master is the peer group the mount receives from as a slave, 0 for
	// none. A container's hostPath mounted HostToContainer is a slave of
	// the host's: Prepare makes it shared too, but the pins it holds
	// reach only the container's own peers and end with the container.
	// Bidirectional makes it a peer of the host's mount instead.
	Master int
}

// Prepare makes dir, an existing directory, a mount point with shared
// propagation, as `ip netns add` makes /var/run/netns: bound on itself
// when it is none, then marked shared (recursively, with the pins below
// it), so that the pins mounted in it propagate to the mount's peers. It
// is idempotent: a directory that is a mount point already (bound by an
// earlier run, or a container's volume) is only marked shared, never
// bound again over the pins it holds. It needs CAP_SYS_ADMIN.
func Prepare(dir string) (Propagation, error) {
	var prop Propagation
	for {
		err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			break
		}
		// EINVAL: dir is no mount's root, so there is no mount whose
		// propagation to change. Bound on itself it becomes one.
		if !errors.Is(err, unix.EINVAL) || prop.Bound {
			return prop, fmt.Errorf("make %s a shared mount: %w", dir, err)
		}
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return prop, fmt.Errorf("bind %s on itself: %w", dir, err)
		}
		prop.Bound = true
	}
	peer, master, err := mountPropagation(dir)
	if err != nil {
		return prop, err
	}
	if peer == 0 {
		return prop, fmt.Errorf("%s: marked shared, yet in no peer group", dir)
	}
	prop.PeerGroup, prop.Master = peer, master
	return prop, nil
}

// mountPropagation returns the peer group and the master of the mount at
// dir, from this process's mountinfo: the line whose mount ID is the one
// statx gives for dir.
func mountPropagation(dir string) (peer, master int, err error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, 0, fmt.Errorf("statx %s: %w", dir, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, 0, fmt.Errorf("statx %s: this kernel gives no mount ID", dir)
	}
	const mountinfo = "/proc/self/mountinfo"
	f, err := os.Open(mountinfo)
	if err != nil {
		return 0, 0, fmt.Errorf("read mount propagation: %w", err)
	}
	defer f.Close()
	id := strconv.FormatUint(stx.Mnt_id, 10)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20) // a line holds paths and options: long, yet bounded
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || fields[0] != id {
			continue
		}
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			k, v, _ := strings.Cut(opt, ":")
			n, _ := strconv.Atoi(v)
			switch k {
			case "shared":
				peer = n
			case "master":
				master = n
			}
		}
		return peer, master, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", mountinfo, err)
	}
	return 0, 0, fmt.Errorf("%s: mount %s of %s not listed", mountinfo, id, dir)
}

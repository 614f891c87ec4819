package hsnlink

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// handleIn returns a netlink handle whose socket lives in the network
// namespace of fd. A netlink socket stays in the namespace it was made in,
// so only its making needs a thread in that namespace: a goroutine of its
// own, locked to its thread and never unlocked, so that the runtime ends
// the thread with it and the switched thread never runs anything else.
// The caller's thread is never switched, and nothing needs switching back.
// It returns an error wrapping the setns errno: EBADF for a closed
// descriptor, EINVAL for one that is not a network namespace.
func handleIn(fd int) (*netlink.Handle, error) {
	if fd < 0 {
		return nil, fmt.Errorf("netns descriptor %d: %w", fd, unix.EBADF)
	}
	type result struct {
		h   *netlink.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: os.NewSyscallError("setns", err)}
			return
		}
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			err = fmt.Errorf("netlink socket in the pod's namespace: %w", err)
		}
		done <- result{h: h, err: err}
	}()
	r := <-done
	return r.h, r.err
}

// nsLabel names the namespace of fd by its inode, as the agent records it
// and `ip netns identify` or /proc/<pid>/ns/net show it.
func nsLabel(fd int) string {
	if fd < 0 {
		return "closed netns"
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Sprintf("netns fd %d", fd)
	}
	return fmt.Sprintf("netns %d", st.Ino)
}

// tempPrefix begins the temporary names of children being made.
const tempPrefix = "hsntmp"

// tempName returns a name for a child being made, unique enough that two
// agents' or two calls' never meet: 6 + 8 characters, within IFNAMSIZ.
func tempName() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random link name: %w", err)
	}
	return tempPrefix + hex.EncodeToString(b[:]), nil
}

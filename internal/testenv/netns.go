package testenv

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// NewNetNS returns a new network namespace held only by the returned
// file, which the test's cleanup closes, destroying the namespace and its
// links. It is made on a thread of its own, locked and never unlocked,
// which ends with its goroutine: no other thread of the test enters it.
// It needs CAP_SYS_ADMIN, and fails the test without it.
func NewNetNS(t testing.TB) *os.File {
	t.Helper()
	var f *os.File
	err := OnThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		return err
	})
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// OnThread runs f on a goroutine locked to its thread and never
// unlocked, so that whatever namespace f switches the thread into dies
// with it, and returns f's error.
func OnThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- f()
	}()
	return <-done
}

// InNetNS runs f on a thread in the network namespace held by ns and
// returns its error: the processes f starts are born there.
func InNetNS(ns *os.File, f func() error) error {
	fd := int(ns.Fd())
	return OnThread(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return f()
	})
}

package main

import (
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// TestNamespaceSwitchesNeverWedgeTheMainThread: goroutines that switch
// their locked threads into new network namespaces and end, as package
// hsnlink's do, never leave the process's main thread (whose namespace
// /proc/<pid>/ns/net shows) in one: init keeps it for the main
// goroutine.
func TestNamespaceSwitchesNeverWedgeTheMainThread(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "a new network namespace needs CAP_SYS_ADMIN")
	}
	before := netnsOf(t, "/proc/self/ns/net")
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() {
			if err := testenv.OnThread(func() error { return unix.Unshare(unix.CLONE_NEWNET) }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if after := netnsOf(t, "/proc/self/ns/net"); after != before {
		t.Fatalf("the main thread is in network namespace %d, was %d: a switched goroutine ended on it", after, before)
	}
}

func netnsOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

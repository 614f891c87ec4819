package cdispec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

func TestAllocationKey(t *testing.T) {
	a := AllocationKey([]string{"0000:41:00.0", "0000:21:00.0"})
	b := AllocationKey([]string{"0000:21:00.0", "0000:41:00.0"})
	c := AllocationKey([]string{"0000:21:00.0"})
	if a != b || a == c || len(a) != 16 {
		t.Fatalf("keys %q %q %q: want order-independent, distinct, 16 hex", a, b, c)
	}
}

// TestRuntimeSeesWrittenSpec writes a spec and resolves it the way a
// container runtime does, with its own CDI cache over the same directory.
func TestRuntimeSeesWrittenSpec(t *testing.T) {
	dir := t.TempDir()
	w, err := New(dir, "hpe.com/cxi")
	if err != nil {
		t.Fatal(err)
	}
	key := AllocationKey([]string{"0000:21:00.0"})
	devNode := filepath.Join(t.TempDir(), "cxi0")
	if err := os.WriteFile(devNode, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	edits := Edits{Env: []string{"SLINGSHOT_VNIS=1024", "SLINGSHOT_SVC_IDS=2"}}
	if err := w.Write(key, edits); err != nil {
		t.Fatal(err)
	}
	runtime, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin"}}}
	if unresolved, err := runtime.InjectDevices(spec, w.DeviceName(key)); err != nil {
		t.Fatalf("InjectDevices: %v (unresolved %v)", err, unresolved)
	}
	for _, want := range edits.Env {
		if !slices.Contains(spec.Process.Env, want) {
			t.Fatalf("env %v lacks %s", spec.Process.Env, want)
		}
	}

	// A container restart rewrites the spec with new values.
	if err := w.Write(key, Edits{Env: []string{"SLINGSHOT_VNIS=2048", "SLINGSHOT_SVC_IDS=3"}}); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Refresh(); err != nil {
		t.Fatal(err)
	}
	spec = &oci.Spec{Process: &oci.Process{}}
	if _, err := runtime.InjectDevices(spec, w.DeviceName(key)); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, "SLINGSHOT_VNIS=2048") {
		t.Fatalf("rewritten spec not seen: %v", spec.Process.Env)
	}

	if err := w.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(key); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	_ = runtime.Refresh()
	if _, err := runtime.InjectDevices(&oci.Spec{Process: &oci.Process{}}, w.DeviceName(key)); err == nil {
		t.Fatal("a removed spec still resolves")
	}
}

func TestNewRejectsBadKind(t *testing.T) {
	for _, kind := range []string{"cxi", "/cxi", "hpe.com/"} {
		if _, err := New(t.TempDir(), kind); err == nil {
			t.Errorf("New(%q) succeeded", kind)
		}
	}
}

// TestDeviceNodeAtDev: a device node under another dev root (a test's, or
// a container's view of the host's /dev) appears at /dev/<name> in the
// container.
func TestDeviceNodeAtDev(t *testing.T) {
	dir := t.TempDir()
	w, err := New(dir, "hpe.com/cxi")
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(t.TempDir(), "cxi0")
	// A character device (/dev/null's numbers): the runtime refuses other files.
	if err := unix.Mknod(host, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		testenv.RequirePrivileged(t, fmt.Sprintf("cannot make a device node here: %v", err))
	}
	if err := w.Write("claim-1", Edits{DeviceNodes: []string{host}}); err != nil {
		t.Fatal(err)
	}
	runtime, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if unresolved, err := runtime.InjectDevices(spec, w.DeviceName("claim-1")); err != nil {
		t.Fatalf("InjectDevices: %v (unresolved %v)", err, unresolved)
	}
	if spec.Linux == nil || len(spec.Linux.Devices) != 1 || spec.Linux.Devices[0].Path != "/dev/cxi0" {
		t.Fatalf("devices = %+v, want /dev/cxi0", spec.Linux)
	}
}

// TestWaitVisible: with WaitVisible, Write returns once its cache in the
// runtimes' auto-refresh mode holds the device with the edits written,
// first and on a rewrite. A cache whose watch is stopped never sees the
// write, and Write gives up at the timeout, saying so.
func TestWaitVisible(t *testing.T) {
	dir := t.TempDir()
	type wait struct {
		took    time.Duration
		visible bool
	}
	var waits []wait
	w, err := New(dir, "hpe.com/cxi", WaitVisible(10*time.Second, func(took time.Duration, visible bool) {
		waits = append(waits, wait{took, visible})
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	key := AllocationKey([]string{"0000:21:00.0"})
	for _, vni := range []string{"1024", "2048"} {
		if err := w.Write(key, Edits{Env: []string{"SLINGSHOT_VNIS=" + vni}}); err != nil {
			t.Fatal(err)
		}
		if len(waits) == 0 || !waits[len(waits)-1].visible {
			t.Fatalf("VNI %s: waits %+v, want the last visible", vni, waits)
		}
		if d := w.view.GetDevice(w.DeviceName(key)); d == nil || !slices.Equal(d.ContainerEdits.Env, []string{"SLINGSHOT_VNIS=" + vni}) {
			t.Fatalf("VNI %s: the view has %+v once Write returned", vni, d)
		}
	}

	// The watch stopped: nothing refreshes the view, and Write times out.
	stopped, err := New(dir, "hpe.com/cxi", WaitVisible(20*time.Millisecond, func(took time.Duration, visible bool) {
		waits = append(waits, wait{took, visible})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stopped.Close(); err != nil {
		t.Fatal(err)
	}
	n := len(waits)
	if err := stopped.Write(AllocationKey([]string{"0000:41:00.0"}), Edits{Env: []string{"SLINGSHOT_VNIS=4096"}}); err != nil {
		t.Fatal(err)
	}
	if len(waits) != n+1 || waits[n].visible || waits[n].took < 20*time.Millisecond {
		t.Fatalf("waits %+v, want one more, not visible, after the 20ms timeout", waits[n:])
	}
}

// BenchmarkWriteVisible is one spec written with WaitVisible beside
// others already in the directory: the runtimes' auto-refresh cache (and
// WaitVisible's) rescans every spec at each change, so the wait, and the
// CPU the view spends, grow with the specs on the node.
func BenchmarkWriteVisible(b *testing.B) {
	for _, others := range []int{0, 64, 256} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			dir := b.TempDir()
			var waited time.Duration
			w, err := New(dir, "hpe.com/cxi", WaitVisible(10*time.Second, func(took time.Duration, visible bool) {
				if !visible {
					b.Fatal("spec not visible within 10 s")
				}
				waited += took
			}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = w.Close() })
			env := []string{"SLINGSHOT_VNIS=1024,900", "SLINGSHOT_SVC_IDS=12,13", "SLINGSHOT_TCS=0x6", "SLINGSHOT_DEVICES=cxi0,cxi1"}
			for i := range others {
				if err := w.Write(fmt.Sprintf("other%04d", i), Edits{Env: env}); err != nil {
					b.Fatal(err)
				}
			}
			waited = 0
			b.ResetTimer()
			for i := range b.N {
				if err := w.Write(fmt.Sprintf("pod%d", i%8), Edits{Env: append(env, fmt.Sprintf("N=%d", i))}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(waited.Microseconds())/float64(b.N), "wait-µs/op")
		})
	}
}

package ipamplugin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// hsn0 is the pool of the end-to-end tests: a /16 in /24 slices, as the
// chart's example.
var hsn0 = ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceBits: 24}

const testNode = "node-a"

// realAgent is the agent's real allocator, its state under a temporary
// directory, serving its real handler on a unix socket; ipamtest's
// controller leases it slices.
type realAgent struct {
	t      testing.TB
	ctl    *ipamtest.Controller
	dir    string
	socket string
	alloc  *ipam.Allocator
	stop   func()
}

// startAgent starts the allocator and its server and returns once the
// allocator has leased its first slice, so that ADDs find the pool warm.
// The test's cleanup stops both.
func startAgent(t testing.TB) *realAgent {
	t.Helper()
	dir := t.TempDir()
	r := &realAgent{t: t, ctl: ipamtest.NewController(hsn0), dir: dir, socket: filepath.Join(dir, "ipam.sock")}
	warm := &warmSlicer{Slicer: r.ctl.Node(testNode), warm: make(chan struct{})}
	r.start(warm)
	select {
	case <-warm.warm:
	case <-time.After(10 * time.Second):
		t.Fatal("the allocator leased no slice within 10s")
	}
	return r
}

// restart starts the agent again after stop, from its state file, on the
// same socket: a restarted agent knows its pools and slices at once.
func (r *realAgent) restart() {
	r.t.Helper()
	r.stop()
	r.start(r.ctl.Node(testNode))
}

func (r *realAgent) start(slicer ipam.Slicer) {
	t := r.t
	t.Helper()
	a, err := ipam.New(ipam.Options{StatePath: filepath.Join(r.dir, "ipam.json"), Slicer: slicer})
	if err != nil {
		t.Fatalf("ipam.New: %v", err)
	}
	l, err := net.Listen("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: a.Handler()}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("agent's server: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			t.Errorf("allocator's Run: %v", err)
		}
	}()
	r.alloc = a
	r.stop = sync.OnceFunc(func() {
		srv.Close()
		cancel()
		wg.Wait()
	})
	t.Cleanup(r.stop)
}

// warmSlicer closes warm when the first Acquire succeeds.
type warmSlicer struct {
	ipam.Slicer
	once sync.Once
	warm chan struct{}
}

func (w *warmSlicer) Acquire(ctx context.Context, pool string, count int) ([]ipam.Slice, error) {
	s, err := w.Slicer.Acquire(ctx, pool, count)
	if err == nil {
		w.once.Do(func() { close(w.warm) })
	}
	return s, err
}

// inNodeSlice reports whether p is an address of a slice the controller
// leases to the node, with the pool's prefix length.
func (r *realAgent) inNodeSlice(p netip.Prefix) bool {
	for _, s := range r.ctl.Held(hsn0.Name, testNode) {
		if s.Prefix.Contains(p.Addr()) && p.Bits() == hsn0.Prefix.Bits() {
			return true
		}
	}
	return false
}

// owners returns the CNI attachments holding an address.
func (r *realAgent) owners() []string { return r.alloc.Owners("cni/") }

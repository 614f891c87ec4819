package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// hsn0 is the pool every plugin allocates from: the whole /16 for
// host-local; /24 slices leased to the node for slingshot-ipam and for
// whereabouts' node-slice mode.
var hsn0 = ipam.Pool{Name: "hsn0", Prefix: netip.MustParsePrefix("10.150.0.0/16"), SliceBits: 24}

const nodeName = "node-a"

// setupSlingshot builds slingshot-ipam in the repository at root (as
// make build does) and starts the agent's real allocator serving its real
// handler on a unix socket, returning once the allocator holds a slice.
func setupSlingshot(ctx context.Context, root, dir string) (*plugin, func(), error) {
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, nil, err
	}
	bin := filepath.Join(dir, "bin", "slingshot-ipam")
	if err := goBuild(ctx, root, nil, bin, "./cmd/slingshot-ipam"); err != nil {
		return nil, nil, err
	}

	ctl := ipamtest.NewController(hsn0)
	warm := &warmSlicer{Slicer: ctl.Node(nodeName), warm: make(chan struct{})}
	a, err := ipam.New(ipam.Options{
		StatePath: filepath.Join(dir, "ipam.json"),
		Slicer:    warm,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("ipam.New: %w", err)
	}
	socket := filepath.Join(dir, "ipam.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	srv := &http.Server{Handler: a.Handler()}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "slingshot agent's server: %v\n", err)
		}
	})
	wg.Go(func() {
		if err := a.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "slingshot allocator: %v\n", err)
		}
	})
	done := func() {
		srv.Close()
		cancel()
		wg.Wait()
	}
	select {
	case <-warm.warm:
	case <-time.After(30 * time.Second):
		return nil, done, errors.New("the allocator leased no slice within 30s")
	}

	p := &plugin{
		name:    "slingshot-ipam",
		about:   "built from this tree; the agent's allocator (agent/ipam) in this process on " + socket,
		bin:     bin,
		cniPath: filepath.Dir(bin),
		netns:   filepath.Join(dir, "no-netns"),
		conf: fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"hsn","type":"macvlan","master":"hsn0",`+
			`"ipam":{"type":"slingshot-ipam","pool":%q,"socket":%q,"timeout":"5s"}}`, hsn0.Name, socket),
		inRange: func(addr netip.Prefix) error {
			for _, s := range ctl.Held(hsn0.Name, nodeName) {
				if s.Prefix.Contains(addr.Addr()) && addr.Bits() == hsn0.Prefix.Bits() {
					return nil
				}
			}
			return fmt.Errorf("address %v is in none of the node's slices %v", addr, ctl.Held(hsn0.Name, nodeName))
		},
		verify: func(context.Context) error {
			if o := a.Owners("cni/"); len(o) != 0 {
				return fmt.Errorf("%d addresses still allocated: %v", len(o), o)
			}
			return nil
		},
	}
	return p, done, nil
}

// warmSlicer closes warm once the allocator's first Acquire succeeds, so
// that timing starts with the pool warm.
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

// goBuild builds pkgs in the module at dir into out (a file for one
// package, a directory ending in / for several) with the flags make build
// uses: static, trimmed, stripped.
func goBuild(ctx context.Context, dir string, env []string, out string, pkgs ...string) error {
	args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"CGO_ENABLED=0", "GOWORK=off"}, env...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, b)
	}
	return nil
}

package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// readyz serves the agent's admin endpoint with notReady and returns a
// function that GETs /readyz. The kubelet is never served, so a readiness
// without a default-service reason is "not serving".
func readyz(t *testing.T, notReady func() string) func() (int, string) {
	t.Helper()
	var ready atomic.Bool
	ready.Store(true)
	report := func(context.Context) *inspect.Report { return &inspect.Report{} }
	srv, lis, err := serveHTTP("127.0.0.1:0", "", prometheus.NewRegistry(), &ready, func() bool { return false }, report, notReady)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + lis.Addr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
}

// TestItem6OpenDefaultServiceFailsReadiness: an enabled default service
// admits every process of the node to its VNIs, so every pod holding a NIC
// shares them whatever its job. The agent checks each NIC's at start and
// at every poll after (an admin may enable it any time), exports
// slingshot_agent_default_service_open{nic}, and /readyz fails naming the
// NIC while one is open, unless allowOpenDefaultService accepts it.
func TestItem6OpenDefaultServiceFailsReadiness(t *testing.T) {
	r := newSimRig(t, t.TempDir())
	g := newDefaultServiceGuard(r.nics, r.m, testLogger(t), false)
	get := readyz(t, g.notReady)
	gauge := func(nicName string) float64 {
		return testutil.ToFloat64(r.m.defaultServiceOpen.WithLabelValues(nicName))
	}

	if why := g.notReady(); !strings.Contains(why, "not checked yet") {
		t.Fatalf("before the first check: %q, want not ready", why)
	}
	g.check(t.Context())
	if why := g.notReady(); why != "" || gauge("cxi0") != 0 || gauge("cxi1") != 0 {
		t.Fatalf("both disabled (the driver's default): not ready %q, gauges %v %v", why, gauge("cxi0"), gauge("cxi1"))
	}
	if code, body := get(); code != http.StatusServiceUnavailable || strings.Contains(body, "default") {
		t.Fatalf("/readyz = %d %q: want the device plugin's reason only", code, body)
	}

	r.enableDefault(t, "cxi1", true) // cxi_service enable -s 1 -d cxi1
	g.check(t.Context())
	why := g.notReady()
	if gauge("cxi1") != 1 || gauge("cxi0") != 0 || !strings.Contains(why, "of cxi1 is open, enabled with open membership: every process of the node may use VNIs 1, 10") ||
		strings.Contains(why, "cxi0") {
		t.Fatalf("cxi1 open: not ready %q, gauges cxi0 %v cxi1 %v", why, gauge("cxi0"), gauge("cxi1"))
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: the default CXI service (ID 1) of cxi1 is open") ||
		!strings.Contains(body, "allowOpenDefaultService") {
		t.Fatalf("/readyz = %d %q: want the open default service of cxi1 named", code, body)
	}

	g.setAllow(true) // the admin accepts it
	if why := g.notReady(); why != "" || gauge("cxi1") != 1 {
		t.Fatalf("accepted: not ready %q, gauge %v; want ready, still reported", why, gauge("cxi1"))
	}
	g.setAllow(false)
	r.enableDefault(t, "cxi1", false)
	g.check(t.Context())
	if why := g.notReady(); why != "" || gauge("cxi1") != 0 {
		t.Fatalf("closed again: not ready %q, gauge %v", why, gauge("cxi1"))
	}
}

// TestItem6DefaultServiceRecheckedWhileRunning: the loop notices a default
// service enabled after start, and a NIC that cannot be read is not
// called closed.
func TestItem6DefaultServiceRecheckedWhileRunning(t *testing.T) {
	r := newSimRig(t, t.TempDir())
	broken := &failingGet{Driver: r.nics["cxi1"].drv}
	r.nics["cxi1"].drv = broken
	g := newDefaultServiceGuard(r.nics, r.m, testLogger(t), false)
	g.check(t.Context())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, 5*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	r.enableDefault(t, "cxi0", true)
	waitFor(t, "the loop sees cxi0's default service open", func() bool {
		return testutil.ToFloat64(r.m.defaultServiceOpen.WithLabelValues("cxi0")) == 1
	})
	if why := g.notReady(); !strings.Contains(why, "cxi0") {
		t.Fatalf("not ready %q, want cxi0 named", why)
	}

	r.enableDefault(t, "cxi0", false)
	broken.fail.Store(true)
	waitFor(t, "cxi0 closed and cxi1 unreadable", func() bool {
		why := g.notReady()
		return !strings.Contains(why, "of cxi0") && strings.Contains(why, "cannot check the default CXI service of cxi1: check the default service: device gone")
	})
}

// failingGet is a NIC whose services cannot be read once fail is set.
type failingGet struct {
	engine.Driver
	fail atomic.Bool
}

func (f *failingGet) Get(ctx context.Context, id uint32) (cxi.Service, error) {
	if f.fail.Load() {
		return cxi.Service{}, errors.New("device gone")
	}
	return f.Driver.Get(ctx, id)
}

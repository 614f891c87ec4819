package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
	"github.com/slingshot-k8s/slingshot/agent/internal/agenttest"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// simRig is the agent's NICs over two simulated devices, counted into
// its metrics as the agent counts them, with an engine over a checkpoint
// under dir: what the agent's root builds before a front end.
type simRig struct {
	nics   nicSet
	sims   map[string]*sim.Device
	m      *metrics
	events *eventtest.Recorder
	cdi    *cdispec.Writer
	store  *checkpoint.Store
	eng    *engine.Engine
	// defaults are the engine's service defaults, as configured.
	defaults engine.Defaults
}

func newSimRig(t testing.TB, dir string) *simRig {
	t.Helper()
	r := &simRig{nics: nicSet{}, sims: map[string]*sim.Device{}, m: newMetrics(time.Now), events: &eventtest.Recorder{},
		defaults: engine.Defaults{TCs: cxi.DefaultTrafficClasses}}
	fastRetry := backoff.Policy{Initial: time.Millisecond, Attempts: 3, Wait: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	for i, name := range []string{"cxi0", "cxi1"} {
		s, err := sim.Open(filepath.Join(dir, "sim"), name, sim.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		r.sims[name] = s
		client := cxi.NewClient(countingDevice{Device: uapi.NewDevice(s), busy: r.m.busyRetries.WithLabelValues(name)}, cxi.WithDestroyRetry(fastRetry))
		r.nics[name] = &nic{name: name, index: i, drv: client}
	}
	w, err := cdispec.New(filepath.Join(dir, "cdi"), "hpe.com/cxi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	r.cdi = w
	if r.store, err = checkpoint.Open(filepath.Join(dir, CheckpointName), "n1", 0); err != nil {
		t.Fatal(err)
	}
	r.eng, err = engine.New(engine.Config{
		Node: "n1", Store: r.store, NICs: r.nics, Leaser: stubLeaser{}, Metrics: r.m.engine(),
		Defaults: func() engine.Defaults { return r.defaults },
		Events:   r.events, Log: testLogger(t), Now: time.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// enableDefault does what `cxi_service enable|disable -s 1 -d NIC` does.
func (r *simRig) enableDefault(t *testing.T, nicName string, on bool) {
	t.Helper()
	if err := uapi.NewDevice(r.sims[nicName]).EnableService(cxi.DefaultServiceID, on); err != nil {
		t.Fatalf("SVC_ENABLE(1, %v) on %s: %v", on, nicName, err)
	}
}

// stubLeaser leases every pod VNI 1024 and accepts every release.
type stubLeaser struct{}

func (stubLeaser) AcquireJobVNI(_ context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	return controllerclient.Lease{Key: p.Namespace + "/" + p.Name, VNI: 1024, Scope: controllerclient.ScopeJob}, nil
}

func (stubLeaser) ReleaseJobVNI(context.Context, controllerclient.Lease) error { return nil }

// The shared helpers (agenttest), by the names these tests use.
var (
	testLogger        = agenttest.Logger
	testLoggerDiscard = agenttest.Discard
	waitFor           = agenttest.WaitFor
	histogramCount    = agenttest.HistogramCount
)

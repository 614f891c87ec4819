package devplugin

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/internal/controllertest"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// timedDriver adds up the time spent in the driver, so benchmarks can
// report the agent's own share of a bind apart from it.
type timedDriver struct {
	engine.Driver
	mu    sync.Mutex
	total time.Duration
}

func (d *timedDriver) time(start time.Time) {
	d.mu.Lock()
	d.total += time.Since(start)
	d.mu.Unlock()
}

func (d *timedDriver) Create(ctx context.Context, s cxi.ServiceSpec) (cxi.Service, error) {
	defer d.time(time.Now())
	return d.Driver.Create(ctx, s)
}

func (d *timedDriver) CreateUnbound(ctx context.Context, s cxi.ServiceSpec) (cxi.Service, error) {
	defer d.time(time.Now())
	return d.Driver.CreateUnbound(ctx, s)
}

func (d *timedDriver) Bind(ctx context.Context, id, inode uint32) (cxi.Service, error) {
	defer d.time(time.Now())
	return d.Driver.Bind(ctx, id, inode)
}

func (d *timedDriver) Destroy(ctx context.Context, id uint32) error {
	defer d.time(time.Now())
	return d.Driver.Destroy(ctx, id)
}

func (d *timedDriver) Get(ctx context.Context, id uint32) (cxi.Service, error) {
	defer d.time(time.Now())
	return d.Driver.Get(ctx, id)
}

// loopbackController serves a real controller (sqlite, group commit) over
// gRPC on loopback, finding pods' owners with res (nil: none), and returns
// a client of it.
func loopbackController(b *testing.B, res controller.Resolver) *controllerclient.Client {
	b.Helper()
	_, addr := controllertest.ServeResolving(b, controller.Config{}, res)
	client, err := controllerclient.Dial(addr, controllerclient.Options{Node: "n1"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = client.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = client.Close()
	})
	return client
}

// BenchmarkPreStart binds one pod per iteration on two NICs (find pod,
// lease its VNI from a controller on loopback, create two services,
// record, publish) and cleans it up again, and reports the latency
// percentiles with and without the time spent in the simulated driver:
// as it ships (cdi: the environment published in a CDI spec, waited for
// until a cache refreshing as the runtime's holds it) and with
// --deviceplugin-nri (nri: no spec; the environment is set at
// CreateContainer).
//
// Each pod is a job of its own, whose VNI the agent leases from the
// controller (a commit to its disk); jobpods binds the pods of one Job,
// which join the lease the node holds for it already, as all but a job's
// first pod on a node do.
//
// The simulated driver keeps its state in memory, as the kernel driver
// does; filesim runs the same over the state file the real-node tests share
// between processes, whose rename per command costs more than the agent's
// whole bind on some disks.
func BenchmarkPreStart(b *testing.B) {
	b.Run("cdi", func(b *testing.B) { benchmarkPreStart(b, preStartCase{}) })
	b.Run("nri", func(b *testing.B) { benchmarkPreStart(b, preStartCase{nri: true}) })
	b.Run("cdi-jobpods", func(b *testing.B) { benchmarkPreStart(b, preStartCase{jobPods: true}) })
	b.Run("cdi-filesim", func(b *testing.B) { benchmarkPreStart(b, preStartCase{fileSim: true}) })
}

type preStartCase struct{ nri, jobPods, fileSim bool }

// jobHandle is a namespace the runtime reported with its pod's labels.
type jobHandle struct {
	fakeHandle
	labels map[string]string
}

func (h *jobHandle) PodMeta() (labels, annotations map[string]string) { return h.labels, nil }

// oneJob is a controller.Resolver for which every pod is one Job's.
type oneJob struct{}

func (oneJob) ResolvePod(_ context.Context, p controller.PodRef) (controller.Resolution, error) {
	return controller.Resolution{
		Pod:    store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Owner:  &store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: p.Namespace, Name: "job-1", UID: "job-1"},
		Policy: controller.Policy{Mode: controller.ModeJob},
	}, nil
}

func (oneJob) OwnerExists(context.Context, store.Owner) (bool, error) { return true, nil }

// jobNetns finds the sandboxes of one Job's pods.
type jobNetns struct{ fakeNetns }

func (j jobNetns) Open(ctx context.Context, uid string) (nsHandle, error) {
	h, err := j.fakeNetns.Open(ctx, uid)
	if err != nil {
		return nil, err
	}
	return &jobHandle{fakeHandle: fakeHandle{ino: h.Inode()}, labels: map[string]string{"batch.kubernetes.io/controller-uid": "job-1"}}, nil
}

func benchmarkPreStart(b *testing.B, c preStartCase) {
	r := newRig(b, b.TempDir(), nil, nil)
	if !c.fileSim {
		for name := range r.drvs {
			s, err := sim.OpenMemory(name, sim.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r.drvs[name] = cxi.NewClient(uapi.NewDevice(s))
		}
	}
	r.b.logger = testLoggerDiscard()
	if c.nri {
		r.b.files.cdi = nil
		r.b.ready = func() error { return nil }
	}
	var owners controller.Resolver
	if c.jobPods {
		owners = oneJob{}
	}
	r.useLeaser(b, loopbackController(b, owners))
	drivers := map[string]*timedDriver{}
	for name, d := range r.drvs {
		td := &timedDriver{Driver: d}
		r.drvs[name] = td
		drivers[name] = td
	}
	driverTime := func() time.Duration {
		var total time.Duration
		for _, d := range drivers {
			d.mu.Lock()
			total += d.total
			d.mu.Unlock()
		}
		return total
	}
	netns := fakeNetns{}
	r.b.netns = netns
	if c.jobPods {
		r.b.netns = jobNetns{netns}
		// The job's first pod runs throughout: the node holds its lease.
		netns["uid-first"] = 4026539999
		first := pod("bench", "first", "uid-first", "main", dev0, dev1)
		r.pods.set(first)
		if err := r.b.PreStart(b.Context(), res, []string{dev0, dev1}); err != nil {
			b.Fatal(err)
		}
	}
	var bind, bindOwn, cleanup []time.Duration
	i := 0
	for b.Loop() {
		i++
		uid := fmt.Sprintf("uid-%d", i)
		netns[uid] = uint32(4026540000 + i)
		r.pods.set(pod("bench", fmt.Sprintf("p-%d", i), uid, "main", dev0, dev1))
		d0, t0 := driverTime(), time.Now()
		if err := r.b.PreStart(b.Context(), res, []string{dev0, dev1}); err != nil {
			b.Fatal(err)
		}
		el := time.Since(t0)
		bind = append(bind, el)
		bindOwn = append(bindOwn, el-(driverTime()-d0))

		r.pods.set()
		t1 := time.Now()
		unlock := r.b.eng.Lock("bench/" + fmt.Sprintf("p-%d", i))
		if !r.b.cleanupLocked(b.Context(), fmt.Sprintf("bench/p-%d", i)) {
			b.Fatal("cleanup did not finish")
		}
		unlock()
		cleanup = append(cleanup, time.Since(t1))
	}
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("prestart", bind)
	report("prestart-excl-driver", bindOwn)
	report("cleanup", cleanup)
}

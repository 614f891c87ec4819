package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"k8s.io/client-go/rest"
)

var (
	hbNodes    = flag.Int("heartbeat.nodes", 5000, "simulated nodes of the heartbeat test")
	hbDuration = flag.Duration("heartbeat.duration", time.Minute, "how long the nodes heartbeat quietly (the steady state), and again while jobs acquire VNIs")
	hbInterval = flag.Duration("heartbeat.interval", 10*time.Second, "each node's heartbeat interval (the agent's default)")
	hbTTL      = flag.Duration("heartbeat.slice-ttl", 0, "the controller's --slice-ttl (0: its default)")
	// A flip is a report that changes whether anything is allocated from
	// a slice, which the controller writes; other reports change only the
	// count, which it does not.
	hbFlips    = flag.Float64("heartbeat.flips", 0.001, "share of heartbeats whose report turns a slice empty or in use")
	hbAcquirer = flag.Int("heartbeat.acquirers", 8, "concurrent clients acquiring job VNIs during the second phase")
)

// writeCounter counts the mutating requests a client sends in n.
type writeCounter struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (w *writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		w.n.Add(1)
	}
	return w.rt.RoundTrip(r)
}

// hbNode is one simulated node: its usage of the slices it leased, and
// its heartbeats' latency in each phase of the test.
type hbNode struct {
	usage []controller.SliceUsage
	lat   [3][]time.Duration
}

// The phases of TestHeartbeats.
const (
	phaseStart   = iota // the nodes start heartbeating
	phaseSteady         // heartbeats alone
	phaseAcquire        // heartbeats while jobs acquire VNIs
)

// TestHeartbeats: simulated nodes each lease one slice of the pod VNI pool
// and one of an IP pool, then heartbeat (RenewSlices with their usage) on
// the agent's interval against the controller on the Kubernetes store,
// with its default slice TTL. A tenth of the heartbeats report a changed
// count of ids in use, and -heartbeat.flips of them turn a slice empty or
// in use. The first phase is the steady state; in the second, clients
// acquire job VNIs as well. It checks that every heartbeat succeeds and
// answers exactly the node's slices, that the store ends holding every
// slice with its node and every acquired lease once with the VNI
// answered, and prints its figures in one line: heartbeat latency, the
// store's API writes per second and per node-hour in the steady state,
// and the acquires' latency under the heartbeats.
func TestHeartbeats(t *testing.T) {
	nodes := *hbNodes
	ns := newNamespace(t, "heartbeat")
	reg := prometheus.NewRegistry()
	ipPool := slices.PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.0.0.0/8"), SliceSize: 24}
	var writes atomic.Int64
	cfg := rest.CopyConfig(srv.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &writeCounter{rt: rt, n: &writes} })
	st, err := kube.New(cfg, kube.Options{Namespace: ns, Identity: "heartbeat"})
	if err != nil {
		t.Fatal(err)
	}
	jobs := controllertest.NewJobs()
	// The pod VNI range takes the top 30,000 VNIs or so, a slice for each
	// node; job VNIs come from below it.
	if nodes < 1 || nodes > 30000 {
		t.Fatalf("-heartbeat.nodes=%d: the VNI range holds pod VNI slices for 1-30000 nodes", nodes)
	}
	podSlice := max(1, min(8, 30000/nodes))
	podVNIs := vnialloc.Range{Min: uint16(65536 - podSlice*nodes), Max: 65535}
	maxJobs := int(podVNIs.Min) - 1024 - 1000
	svc, stop := controllertest.Start(t, st, jobs, controller.Config{
		PodVNIRange: podVNIs, PodVNISliceSize: podSlice, IPPools: []slices.PoolSpec{ipPool},
		SliceTTL: *hbTTL, Registerer: reg})
	ctx := t.Context()

	// Every node leases its slices, 200 at a time.
	start := time.Now()
	sem := make(chan struct{}, 200)
	var wg sync.WaitGroup
	var setupErr atomic.Value
	all := make([]hbNode, nodes)
	for n := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, pool := range []string{slices.PodVNIPool, "hsn0"} {
				got, err := svc.AcquireSlices(ctx, nodeName(n), pool, 1)
				if err != nil || len(got) != 1 {
					setupErr.Store(fmt.Errorf("node %d: acquire %s: %d slices, %v", n, pool, len(got), err))
					return
				}
				// The agent reports the slices it allocates from open.
				all[n].usage = append(all[n].usage, controller.SliceUsage{Pool: got[0].Pool, Index: got[0].Index, Open: true})
			}
		})
	}
	wg.Wait()
	if err, _ := setupErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	setup := time.Since(start)

	// Heartbeats, through both phases.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var beats, failures atomic.Int64
	var phase atomic.Int32
	var lastErr atomic.Value
	fail := func(err error) {
		failures.Add(1)
		lastErr.Store(err.Error())
	}
	for n := range nodes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			me := &all[n]
			// Nodes start spread over one interval, as agents do.
			first := time.NewTimer(time.Duration(rng.Int64N(int64(*hbInterval))))
			defer first.Stop()
			select {
			case <-first.C:
			case <-hctx.Done():
				return
			}
			tick := time.NewTicker(*hbInterval)
			defer tick.Stop()
			for {
				u := &me.usage[rng.IntN(2)]
				switch {
				case rng.Float64() < *hbFlips:
					if u.Allocated == 0 {
						u.Allocated = 1 + rng.IntN(8)
					} else {
						u.Allocated = 0
					}
				case rng.IntN(10) == 0 && u.Allocated != 0:
					u.Allocated = 1 + rng.IntN(8)
				}
				t0 := time.Now()
				held, lost, err := svc.RenewSlices(hctx, nodeName(n), me.usage)
				if hctx.Err() != nil {
					return
				}
				p := phase.Load()
				me.lat[p] = append(me.lat[p], time.Since(t0))
				beats.Add(1)
				switch {
				case err != nil:
					fail(err)
				case len(lost) != 0 || len(held) != 2 || held[0].Index != me.usage[0].Index || held[1].Index != me.usage[1].Index ||
					held[0].Node != nodeName(n) || held[1].Node != nodeName(n):
					fail(fmt.Errorf("node %d reports %+v: held %+v, lost %+v", n, me.usage, held, lost))
				}
				select {
				case <-tick.C:
				case <-hctx.Done():
					return
				}
			}
		})
	}

	// Phase 1, the steady state: the first interval, while the nodes
	// start, is left out.
	mark := func(p int32) (time.Time, int64, int64) {
		phase.Store(p)
		return time.Now(), writes.Load(), beats.Load()
	}
	wait := func(d time.Duration) {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
		}
	}
	wait(*hbInterval)
	t1, w1, b1 := mark(phaseSteady)
	wait(*hbDuration)
	t2, w2, b2 := mark(phaseAcquire)
	steady := t2.Sub(t1)
	steadyWrites := float64(w2-w1) / steady.Seconds()
	steadyBeats := float64(b2-b1) / steady.Seconds()

	// Phase 2: clients acquire job VNIs while the nodes heartbeat.
	actx, acancel := context.WithTimeout(ctx, *hbDuration)
	defer acancel()
	var next atomic.Int64
	type answer struct {
		uid string
		vni uint16
	}
	var mu sync.Mutex
	var acqLat []time.Duration
	var answers []answer
	var acqErr atomic.Value
	var awg sync.WaitGroup
	for range *hbAcquirer {
		awg.Go(func() {
			for actx.Err() == nil {
				i := int(next.Add(1))
				if i > maxJobs {
					return
				}
				owner := jobOwner(2_000_000+i, 0)
				pod := owner.Name + "-0"
				jobs.Add(pod, owner)
				t0 := time.Now()
				// Under ctx, not actx: an acquire the phase's end cut short
				// might still commit, and its answer is needed below.
				l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: pod, UID: fmt.Sprintf("pod-%d", i)}, nodeName(i%nodes))
				d := time.Since(t0)
				if err != nil || l.VNI == 0 {
					acqErr.Store(fmt.Errorf("acquire %d: vni %d, %w", i, l.VNI, err))
					return
				}
				mu.Lock()
				acqLat = append(acqLat, d)
				answers = append(answers, answer{uid: owner.UID, vni: l.VNI})
				mu.Unlock()
			}
		})
	}
	awg.Wait()
	t3, w3, _ := mark(phaseAcquire)
	cancel()
	wg.Wait()
	stop()

	if err, _ := acqErr.Load().(error); err != nil {
		t.Error(err)
	}
	if failures.Load() > 0 {
		t.Errorf("%d heartbeats failed (last: %v)", failures.Load(), lastErr.Load())
	}
	if want := steady.Seconds() / hbInterval.Seconds() * float64(nodes) * 0.95; float64(b2-b1) < want {
		t.Errorf("%d heartbeats in the steady state, want at least %.0f: the controller fell behind", b2-b1, want)
	}

	// What the store holds, read back as a new leader would.
	loadStart := time.Now()
	check, err := openKube(t, ns, "check").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What a new leader spends loading the state, after the election.
	load := time.Since(loadStart)
	if len(check.Slices) != 2*nodes {
		t.Errorf("store holds %d slices, want %d", len(check.Slices), 2*nodes)
	}
	owner := map[string]string{}
	for _, sl := range check.Slices {
		owner[fmt.Sprintf("%s/%d", sl.Pool, sl.Index)] = sl.Node
	}
	for n, node := range all {
		for _, u := range node.usage {
			if got := owner[fmt.Sprintf("%s/%d", u.Pool, u.Index)]; got != nodeName(n) {
				t.Errorf("slice %s/%d of %s is stored as %q's", u.Pool, u.Index, nodeName(n), got)
			}
		}
	}
	leases := map[string]uint16{}
	vnis := map[uint16]string{}
	for _, l := range check.Leases {
		leases[l.Owner.UID] = l.VNI
		if other, ok := vnis[l.VNI]; ok {
			t.Errorf("vni %d leased to %s and %s", l.VNI, other, l.Owner.UID)
		}
		vnis[l.VNI] = l.Owner.UID
	}
	if len(check.Leases) != len(answers) {
		t.Errorf("store holds %d leases, %d acquired", len(check.Leases), len(answers))
	}
	for _, a := range answers {
		if got, ok := leases[a.uid]; !ok || got != a.vni {
			t.Errorf("lease of %s answered vni %d, stored %d (present %v)", a.uid, a.vni, got, ok)
		}
	}

	var lat, latAcq []time.Duration
	for _, n := range all {
		lat = append(lat, n.lat[phaseSteady]...)
		latAcq = append(latAcq, n.lat[phaseAcquire]...)
	}
	acq := t3.Sub(t2)
	objects, err := srv.ObjectCount(ctx, "slingshot.hpe.com/")
	if err != nil {
		t.Fatal(err)
	}
	dbSize, err := srv.EtcdDBSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ttl := *hbTTL
	if ttl == 0 {
		ttl = 60 * time.Second
	}
	t.Logf("%d nodes leased %d slices in %v (slice TTL %v, heartbeat every %v, %.1f%% flips)",
		nodes, len(check.Slices), setup.Round(time.Millisecond), ttl, *hbInterval, 100**hbFlips)
	t.Logf("heartbeats: %d nodes, %.0f/s; steady: p50 %v p99 %v max %v, %.1f API writes/s = %.2f per node-hour; "+
		"with %d acquirers: heartbeat p99 %v max %v, %.1f API writes/s, %d acquires (%.0f/s) p50 %v p99 %v; %d failed; %d store objects (a new leader's load %v), etcd %.1f MiB",
		nodes, steadyBeats, pct(lat, 50), pct(lat, 99), pct(lat, 100), steadyWrites, steadyWrites*3600/float64(nodes),
		*hbAcquirer, pct(latAcq, 99), pct(latAcq, 100), float64(w3-w2)/acq.Seconds(), len(acqLat), float64(len(acqLat))/acq.Seconds(),
		pct(acqLat, 50), pct(acqLat, 99), failures.Load(), objects, load.Round(time.Millisecond), float64(dbSize)/(1<<20))
}

func nodeName(n int) string { return fmt.Sprintf("node-%05d", n) }

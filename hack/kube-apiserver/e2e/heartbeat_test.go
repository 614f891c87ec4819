package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	hbNodes    = flag.Int("heartbeat.nodes", 5000, "simulated nodes of the heartbeat test")
	hbDuration = flag.Duration("heartbeat.duration", time.Minute, "how long the nodes heartbeat")
	hbInterval = flag.Duration("heartbeat.interval", 10*time.Second, "each node's heartbeat interval (the agent's default)")
	// The controller persists a slice's renewal every TTL/2: 10,000 slices
	// at the default 60 s TTL are 333 writes/s, more than the API server on
	// a busy 2-core machine sustains (about 180/s). 5 min is the TTL the
	// README advises for the Kubernetes store at thousands of nodes.
	hbTTL = flag.Duration("heartbeat.slice-ttl", 5*time.Minute, "the controller's --slice-ttl")
)

// TestHeartbeats: simulated nodes each lease one slice of the pod VNI pool
// and one of an IP pool, then heartbeat (RenewSlices with their usage, a
// tenth of them changed each time) on the agent's interval, against the
// controller on the Kubernetes store. It reports the heartbeat rate, its
// latency, the store's writes and the API server's object count; every
// heartbeat must succeed and no node may lose a slice.
func TestHeartbeats(t *testing.T) {
	nodes := *hbNodes
	ns := newNamespace(t, "heartbeat")
	reg := prometheus.NewRegistry()
	ipPool := slices.PoolSpec{Name: "hsn0", Prefix: netip.MustParsePrefix("10.0.0.0/8"), SliceSize: 24}
	svc := runService(t, openKube(t, ns, "heartbeat"), nil, controller.Config{
		PodVNIRange: vnialloc.Range{Min: 16384, Max: 65535}, PodVNISliceSize: 8, IPPools: []slices.PoolSpec{ipPool},
		SliceTTL: *hbTTL, SweepInterval: time.Hour, Registerer: reg})
	ctx := t.Context()

	// Every node leases its slices, 200 at a time.
	start := time.Now()
	sem := make(chan struct{}, 200)
	var wg sync.WaitGroup
	var setupErr atomic.Value
	held := make([][]controller.SliceUsage, nodes)
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
				held[n] = append(held[n], controller.SliceUsage{Pool: got[0].Pool, Index: got[0].Index})
			}
		})
	}
	wg.Wait()
	if err, _ := setupErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	setup := time.Since(start)
	commitsBefore := histogramCount(t, reg, "slingshot_controller_commit_duration_seconds")
	opsBefore := histogramSum(t, reg, "slingshot_controller_commit_batch_ops")

	// Heartbeats.
	hctx, cancel := context.WithTimeout(ctx, *hbDuration)
	defer cancel()
	lat := make([][]time.Duration, nodes)
	var beats, failures, lostSlices atomic.Int64
	var lastErr atomic.Value
	start = time.Now()
	for n := range nodes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			usage := held[n]
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
				if rng.IntN(10) == 0 {
					usage[rng.IntN(2)].Allocated = rng.IntN(8)
				}
				t0 := time.Now()
				_, lost, err := svc.RenewSlices(hctx, nodeName(n), usage)
				if hctx.Err() != nil {
					return
				}
				lat[n] = append(lat[n], time.Since(t0))
				beats.Add(1)
				if err != nil {
					failures.Add(1)
					lastErr.Store(err.Error())
				}
				lostSlices.Add(int64(len(lost)))
				select {
				case <-tick.C:
				case <-hctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	commits := histogramCount(t, reg, "slingshot_controller_commit_duration_seconds") - commitsBefore
	writes := histogramSum(t, reg, "slingshot_controller_commit_batch_ops") - opsBefore

	list, err := dynamicClient(t).Resource(kube.SliceResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, p := range []string{"", "slingshot.hpe.com/nodeslices/", "slingshot.hpe.com/vnileases/", "slingshot.hpe.com/storejournals/"} {
		if counts[p], err = srv.ObjectCount(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	dbSize, err := srv.EtcdDBSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	t.Logf("%d nodes leased %d slices in %v (slice TTL %v, heartbeat every %v)", nodes, len(list.Items), setup.Round(time.Millisecond), *hbTTL, *hbInterval)
	t.Logf("heartbeats: %d in %v = %.0f/s; latency p50 %v p99 %v max %v; %d failed; %d slices lost",
		beats.Load(), elapsed.Round(time.Millisecond), float64(beats.Load())/elapsed.Seconds(), pct(all, 50), pct(all, 99),
		pct(all, 100), failures.Load(), lostSlices.Load())
	t.Logf("store: %d commits, %.0f record writes (%.0f/s) during the heartbeats", int(commits), writes, writes/elapsed.Seconds())
	t.Logf("API server objects in etcd: %d in all, %d NodeSlices, %d VNILeases, %d StoreJournals; etcd database %.1f MiB",
		counts[""], counts["slingshot.hpe.com/nodeslices/"], counts["slingshot.hpe.com/vnileases/"],
		counts["slingshot.hpe.com/storejournals/"], float64(dbSize)/(1<<20))
	if len(list.Items) != 2*nodes {
		t.Errorf("%d NodeSlice objects, want %d", len(list.Items), 2*nodes)
	}
	if failures.Load() > 0 || lostSlices.Load() > 0 {
		t.Errorf("%d heartbeats failed (last: %v), %d slices lost", failures.Load(), lastErr.Load(), lostSlices.Load())
	}
	if want := int64(float64(nodes) * (elapsed.Seconds()/hbInterval.Seconds() - 1)); beats.Load() < want {
		t.Errorf("%d heartbeats, want at least %d: the controller fell behind", beats.Load(), want)
	}
}

func nodeName(n int) string { return fmt.Sprintf("node-%05d", n) }

func histogramCount(t testing.TB, g prometheus.Gatherer, name string) float64 {
	c, _ := histogram(t, g, name)
	return c
}

func histogramSum(t testing.TB, g prometheus.Gatherer, name string) float64 {
	_, s := histogram(t, g, name)
	return s
}

func histogram(t testing.TB, g prometheus.Gatherer, name string) (count, sum float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			count += float64(m.GetHistogram().GetSampleCount())
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

package e2e

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
)

// BenchmarkAcquire measures job VNI acquires through the controller on
// each store, from 64 concurrent clients: every op leases a VNI to a new
// job and releases it when the job ends (release and finalize untimed in
// the latency, but inside the op rate). It reports acquires/s and the
// acquire latency's p50 and p99.
func BenchmarkAcquire(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			res := newJobResolver()
			svc := runService(b, be.open(b), res, controller.Config{Quarantine: -1, SweepInterval: time.Hour})
			ctx := b.Context()
			var next atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(max(1, 64/max(1, runtimeProcs())))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					n := int(next.Add(1))
					owner := jobOwner(1_000_000+n, 0)
					pod := owner.Name + "-0"
					res.add(pod, owner)
					t0 := time.Now()
					l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: pod, UID: fmt.Sprintf("pod-%d", n)}, "node-1")
					mine = append(mine, time.Since(t0))
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := svc.ReleaseJobVNI(ctx, l.Key, "node-1"); err != nil {
						b.Error(err)
						return
					}
					if _, done, err := svc.FinalizeOwner(ctx, owner, true); err != nil || !done {
						b.Errorf("finalize: done %v, %v", done, err)
						return
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acquires/s")
			b.ReportMetric(float64(pct(lat, 50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(pct(lat, 99).Microseconds())/1000, "p99-ms")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

package e2e

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
)

// BenchmarkAcquire measures job VNI acquires through the controller on
// each store, from 64 concurrent clients: every op leases a VNI to a new
// job on one node (a lease written durably before the answer; group
// commit shares the writes of concurrent acquires). It reports acquires/s
// and the latency's p50 and p99. The range holds 64,512 VNIs: run a fixed
// count below that, e.g. -benchtime 10000x (make e2e-k8s-bench).
func BenchmarkAcquire(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			res := controllertest.NewJobs()
			svc := runService(b, be.open(b), res, controller.Config{SweepInterval: time.Hour})
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
					res.Add(pod, owner)
					t0 := time.Now()
					l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: pod, UID: fmt.Sprintf("pod-%d", n)}, "node-1")
					mine = append(mine, time.Since(t0))
					if err != nil || l.VNI == 0 {
						b.Errorf("acquire: vni %d, %v", l.VNI, err)
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

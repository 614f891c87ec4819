package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

var (
	propClients = flag.Int("property.clients", 64, "concurrent clients of the property test")
	propCycles  = flag.Int("property.cycles", 1000, "cycles per client of the controller's property test (TestPropertyNoVNIHeldByTwoLiveJobs) on both stores, and of TestNoVNIHeldByTwoLiveJobs on sqlite")
	// TestNoVNIHeldByTwoLiveJobs ends a job on every third cycle or so,
	// which costs the Kubernetes store several writes: a tenth of the
	// cycles keeps it near a minute; the controller's own property test
	// runs in full on both stores.
	propKubeCycles = flag.Int("property.kube-cycles", 100, "cycles per client of TestNoVNIHeldByTwoLiveJobs on the Kubernetes store")
)

// holders is the property's referee: which live job holds which VNI,
// from acknowledged answers only.
type holders struct {
	mu     sync.Mutex
	byVNI  map[uint16]string
	byKey  map[string]uint16
	faults []string
}

func (h *holders) hold(key string, vni uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if other, ok := h.byVNI[vni]; ok && other != key {
		h.faults = append(h.faults, fmt.Sprintf("vni %d held by live jobs %s and %s", vni, other, key))
	}
	if v, ok := h.byKey[key]; ok && v != vni {
		h.faults = append(h.faults, fmt.Sprintf("job %s changed vni from %d to %d", key, v, vni))
	}
	h.byVNI[vni], h.byKey[key] = key, vni
}

// end is called before the job's finalize: from then on its VNI may be
// handed to another job.
func (h *holders) end(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.byKey[key]; ok {
		delete(h.byVNI, v)
		delete(h.byKey, key)
	}
}

// slot is one job at a time: clients join its current job, and the last
// one out may end it; a new job (a new UID) then takes the slot.
type slot struct {
	mu    sync.Mutex
	owner store.Owner
	gen   int
	users int
}

// TestNoVNIHeldByTwoLiveJobs is the controller's property test on both
// stores: clients run acquire and release cycles on random jobs, whose
// pods run on the clients' nodes; the last client to leave a job may end
// it (the finalize of a deleted owner). No VNI may ever be held by two
// live jobs, no job's VNI may change, and every finalize of a job no node
// holds must free its VNI. The VNI range is small and there is no
// quarantine, so VNIs are reused all the time.
func TestNoVNIHeldByTwoLiveJobs(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			clients, cycles := *propClients, *propCycles
			if b.name == "kube" {
				cycles = *propKubeCycles
			}
			res := controllertest.NewJobs()
			svc := runService(t, b.open(t), res, controller.Config{
				VNIRange: vnialloc.Range{Min: 1024, Max: 1024 + 4*uint16(clients) - 1}, Quarantine: -1,
				SweepInterval: time.Hour})
			ctx := t.Context()
			h := &holders{byVNI: map[uint16]string{}, byKey: map[string]uint16{}}
			slots := make([]*slot, 2*clients)
			for i := range slots {
				slots[i] = &slot{owner: jobOwner(i, 0)}
			}
			var acquires, finalized atomic.Int64
			lat := make([][]time.Duration, clients)
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 7))
					node := fmt.Sprintf("node-%d", c)
					for i := range cycles {
						s := slots[rng.IntN(len(slots))]
						s.mu.Lock()
						owner := s.owner
						s.users++
						s.mu.Unlock()
						pod := fmt.Sprintf("%s-c%d-%d", owner.Name, c, i)
						res.Add(pod, owner)
						t0 := time.Now()
						l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: pod, UID: "pod-" + pod}, node)
						lat[c] = append(lat[c], time.Since(t0))
						if err != nil {
							errs <- fmt.Errorf("client %d: acquire for %s: %w", c, owner.Name, err)
							return
						}
						acquires.Add(1)
						h.hold(l.Key, l.VNI)
						if _, err := svc.ReleaseJobVNI(ctx, l.Key, node); err != nil {
							errs <- fmt.Errorf("client %d: release %s: %w", c, l.Key, err)
							return
						}
						s.mu.Lock()
						s.users--
						if s.users == 0 && rng.IntN(2) == 0 {
							h.end(l.Key)
							_, done, err := svc.FinalizeOwner(ctx, owner, true)
							if err != nil || !done {
								s.mu.Unlock()
								errs <- fmt.Errorf("client %d: finalize %s: done %v, %v", c, l.Key, done, err)
								return
							}
							finalized.Add(1)
							s.gen++
							s.owner = jobOwner(slotIndex(slots, s), s.gen)
						}
						s.mu.Unlock()
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, f := range h.faults {
				t.Error(f)
			}
			leases, _, err := svc.ListLeases()
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint16]string{}
			for _, l := range leases {
				if other, ok := seen[l.VNI]; ok {
					t.Errorf("vni %d leased to %s and %s at the end", l.VNI, other, l.Key)
				}
				seen[l.VNI] = l.Key
			}
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			t.Logf("%s: %d clients x %d cycles: %d acquires, %d jobs ended, %d leases left, %v (%.0f cycles/s), acquire p50 %v p99 %v",
				b.name, clients, cycles, acquires.Load(), finalized.Load(), len(leases), elapsed.Round(time.Millisecond),
				float64(acquires.Load())/elapsed.Seconds(), pct(all, 50), pct(all, 99))
			if acquires.Load() != int64(clients*cycles) {
				t.Errorf("%d acquires, want %d", acquires.Load(), clients*cycles)
			}
			if finalized.Load() == 0 {
				t.Error("no job ended: the property was not exercised")
			}
		})
	}
}

func jobOwner(slot, gen int) store.Owner {
	return store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "prop", Name: fmt.Sprintf("job-%d-%d", slot, gen),
		UID: fmt.Sprintf("%08x-%04x-4000-8000-000000000000", slot, gen)}
}

func slotIndex(slots []*slot, s *slot) int {
	for i, x := range slots {
		if x == s {
			return i
		}
	}
	return -1
}

// pct returns the p-th percentile of d.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)].Round(10 * time.Microsecond)
}

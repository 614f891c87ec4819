package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// The controller's own property test (controller/property_test.go,
// TestPropertyNoVNIHeldByTwoLiveJobs), carried over unchanged in its
// logic so that it runs on both stores: 64 concurrent clients doing
// acquire and release cycles on random owners, with owners deleted and
// created all along, over a small range with no quarantine so that VNIs
// are reused often.

// oracle tracks what the test knows for sure about jobs and VNIs. A job is
// live while it is not deleted or while some node holds it (acknowledged
// acquire not yet followed by a release call); its VNI must not change
// while it is live, and no other job may get that VNI meanwhile.
type oracle struct {
	mu      sync.Mutex
	jobs    map[string]*jobState
	byVNI   map[uint16]string
	active  []string
	nextJob int
	errs    []error
}

type jobState struct {
	vni     uint16
	deleted bool
	holders int
}

func (o *oracle) live(name string) bool {
	j := o.jobs[name]
	return j != nil && (!j.deleted || j.holders > 0)
}

func (o *oracle) fail(format string, a ...any) {
	if len(o.errs) < 10 {
		o.errs = append(o.errs, fmt.Errorf(format, a...))
	}
}

// acked records an acknowledged acquire of vni for job name.
func (o *oracle) acked(name string, vni uint16) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	j := o.jobs[name]
	if j.deleted {
		return false // raced with the job's deletion: nothing to check
	}
	if j.vni != 0 && j.vni != vni {
		o.fail("job %s got vni %d, had %d while live", name, vni, j.vni)
	}
	if other, ok := o.byVNI[vni]; ok && other != name && o.live(other) {
		o.fail("vni %d handed to %s while live job %s holds it", vni, name, other)
	}
	j.vni = vni
	o.byVNI[vni] = name
	j.holders++
	return true
}

func (o *oracle) released(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.jobs[name].holders--
}

func (o *oracle) pick(rng *rand.Rand) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.active[rng.IntN(len(o.active))]
}

func propJob(name string) store.Owner {
	return store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "prop", Name: name, UID: "uid-" + name}
}

// replace marks a random active job deleted and activates a new one; it
// returns the deleted job.
func (o *oracle) replace(rng *rand.Rand, res *jobResolver) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := rng.IntN(len(o.active))
	old := o.active[i]
	o.jobs[old].deleted = true
	o.nextJob++
	name := fmt.Sprintf("j%d", o.nextJob)
	o.jobs[name] = &jobState{}
	res.add(name, propJob(name))
	o.active[i] = name
	return old
}

func TestPropertyNoVNIHeldByTwoLiveJobs(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			clients, cycles := *propClients, *propCycles
			if b.name == "kube" {
				cycles = *propKubeCycles
			}
			res := newJobResolver()
			svc := runService(t, b.open(t), res, controller.Config{VNIRange: vnialloc.Range{Min: 1024, Max: 1024 + 511}, Quarantine: -1,
				SweepInterval: time.Hour})
			o := &oracle{jobs: map[string]*jobState{}, byVNI: map[uint16]string{}}
			for range 128 {
				o.nextJob++
				name := fmt.Sprintf("j%d", o.nextJob)
				o.jobs[name] = &jobState{}
				res.add(name, propJob(name))
				o.active = append(o.active, name)
			}
			ctx := t.Context()
			start := time.Now()
			var wg sync.WaitGroup
			var unexpected sync.Map
			for c := range clients {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 42))
					node := fmt.Sprintf("node-%d", c)
					for range cycles {
						if rng.IntN(20) == 0 {
							old := o.replace(rng, res)
							res.setGone(propJob(old))
							if _, _, err := svc.FinalizeOwner(ctx, propJob(old), true); err != nil {
								unexpected.Store(err.Error(), err)
							}
						}
						name := o.pick(rng)
						l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: "prop", Name: name}, node)
						switch {
						case errors.Is(err, controller.ErrOwnerGone):
							continue
						case err != nil:
							unexpected.Store(err.Error(), err)
							continue
						}
						checked := o.acked(name, l.VNI)
						if checked {
							o.released(name)
						}
						if _, err := svc.ReleaseJobVNI(ctx, l.Key, node); err != nil {
							unexpected.Store(err.Error(), err)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			unexpected.Range(func(k, _ any) bool { t.Errorf("unexpected error: %v", k); return true })
			for _, err := range o.errs {
				t.Error(err)
			}
			// Deleted jobs with no holders are freed by a sweep (owner gone).
			if err := svc.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			leases, _, _ := svc.ListLeases()
			seen := map[uint16]string{}
			for _, l := range leases {
				if prev, dup := seen[l.VNI]; dup {
					t.Errorf("vni %d leased to %s and %s", l.VNI, prev, l.Key)
				}
				seen[l.VNI] = l.Key
				if l.Scope == store.ScopeJob && len(l.Nodes) != 0 {
					t.Errorf("lease %s still held by %v after every release", l.Key, l.Nodes)
				}
			}
			t.Logf("%s: %d clients x %d cycles in %v (%.0f cycles/s); %d jobs; %d leases remain",
				b.name, clients, cycles, elapsed.Round(time.Millisecond), float64(clients*cycles)/elapsed.Seconds(), o.nextJob, len(leases))
		})
	}
}

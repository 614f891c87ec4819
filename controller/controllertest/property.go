package controllertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// PropertyNamespace holds the jobs of the property test.
const PropertyNamespace = "prop"

// NoVNIHeldByTwoLiveJobs is the controller's central property, checked on
// st: clients concurrent clients, each on its own node, run cycles
// acquires on random jobs, each node holding most leases for a few cycles
// and some for up to a hundred, while jobs are deleted (and finalized,
// often while nodes hold them) and new ones created all along, over 512
// VNIs with no quarantine, so that VNIs are reused often. No VNI may be
// handed to a job while another live job holds it, no live job's VNI may
// change, and after every release and a sweep no job lease is held and
// no VNI is leased twice. It starts a Service over st, which it closes
// at the end of the test.
func NoVNIHeldByTwoLiveJobs(t *testing.T, st store.Store, clients, cycles int) {
	t.Helper()
	jobs := NewJobs()
	svc, _ := Start(t, st, jobs, controller.Config{
		VNIRange:      vnialloc.Range{Min: 1024, Max: 1024 + 511},
		Quarantine:    -1,
		SweepInterval: time.Hour, // the test sweeps once, at the end
	})
	o := &oracle{jobs: map[string]*jobState{}, byVNI: map[uint16]string{}}
	for range 128 {
		o.active = append(o.active, o.newJob(jobs))
	}
	ctx := t.Context()
	start := time.Now()
	var wg sync.WaitGroup
	var unexpected sync.Map
	for c := range clients {
		wg.Go(func() { propertyClient(ctx, svc, o, jobs, c, cycles, &unexpected) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	unexpected.Range(func(k, _ any) bool { t.Errorf("unexpected error: %v", k); return true })
	for _, err := range o.errs {
		t.Error(err)
	}
	leases := checkAllReleased(t, svc)
	t.Logf("%d clients x %d cycles in %v (%.0f cycles/s); %d jobs; %d leases remain",
		clients, cycles, elapsed.Round(time.Millisecond), float64(clients*cycles)/elapsed.Seconds(), o.nextJob, len(leases))
}

// propertyClient is client c of NoVNIHeldByTwoLiveJobs, on its own node.
// The node holds most leases for a few cycles and some for up to a
// hundred, so that jobs are deleted while nodes hold them and their VNIs
// come round again meanwhile.
func propertyClient(ctx context.Context, svc *controller.Allocator, o *oracle, jobs *Jobs, c, cycles int, unexpected *sync.Map) {
	rng := rand.New(rand.NewPCG(uint64(c), 42))
	node := fmt.Sprintf("node-%d", c)
	held := map[string]holding{}
	release := func(name string) {
		h := held[name]
		delete(held, name)
		if h.checked {
			o.released(name) // before the call: from it on, the VNI may be freed
		}
		if _, err := svc.ReleaseJobVNI(ctx, h.key, node); err != nil {
			unexpected.Store(err.Error(), err)
		}
	}
	for i := range cycles {
		if rng.IntN(20) == 0 {
			old := Job(PropertyNamespace, o.replace(rng, jobs))
			jobs.End(old)
			if _, _, err := svc.FinalizeOwner(ctx, old, true); err != nil {
				unexpected.Store(err.Error(), err)
			}
		}
		name := o.pick(rng)
		l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: PropertyNamespace, Name: name, UID: "pod-" + name}, node)
		switch {
		case errors.Is(err, controller.ErrOwnerGone):
		case err != nil:
			unexpected.Store(err.Error(), err)
		default:
			checked := o.acked(name, l.VNI)
			if _, again := held[name]; again {
				// A node holds a job once, however often it asks.
				if checked {
					o.released(name)
				}
				break
			}
			until := i + rng.IntN(4)
			if rng.IntN(50) == 0 {
				until = i + 20 + rng.IntN(80)
			}
			held[name] = holding{key: l.Key, checked: checked, until: until}
		}
		for _, name := range slices.Sorted(maps.Keys(held)) {
			if held[name].until <= i {
				release(name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(held)) {
		release(name)
	}
}

// checkAllReleased sweeps (deleted jobs that no node holds are freed,
// their owner gone) and checks that no VNI is leased twice and no job
// lease is still held; it returns the leases left.
func checkAllReleased(t *testing.T, svc *controller.Allocator) []controller.Lease {
	t.Helper()
	if err := svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	leases, _, err := svc.ListLeases()
	if err != nil {
		t.Fatal(err)
	}
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
	return leases
}

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

// holding is a lease a client's node holds; checked says whether the
// oracle counted it.
type holding struct {
	key     string
	checked bool
	until   int // the cycle that releases it
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

// newJob creates the next job, with one pod of the same name; the caller
// holds o.mu or is the only goroutine.
func (o *oracle) newJob(jobs *Jobs) string {
	o.nextJob++
	name := fmt.Sprintf("j%d", o.nextJob)
	o.jobs[name] = &jobState{}
	jobs.Add(name, Job(PropertyNamespace, name))
	return name
}

// acked records an acknowledged acquire of vni for job name; it reports
// whether the answer was checked (false when it raced with the job's
// deletion, which leaves nothing to check).
func (o *oracle) acked(name string, vni uint16) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	j := o.jobs[name]
	if j.deleted {
		return false
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

// replace marks a random active job deleted and activates a new one; it
// returns the deleted job's name.
func (o *oracle) replace(rng *rand.Rand, jobs *Jobs) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := rng.IntN(len(o.active))
	old := o.active[i]
	o.jobs[old].deleted = true
	o.active[i] = o.newJob(jobs)
	return old
}

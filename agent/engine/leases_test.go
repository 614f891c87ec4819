package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// countingLeaser answers one lease per job (the pod's name up to its
// last "-"), or per pod when scopePod, and counts the calls.
type countingLeaser struct {
	mu       sync.Mutex
	acquires int
	releases int
	held     map[string]bool
	scopePod bool
}

func (c *countingLeaser) AcquireJobVNI(_ context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acquires++
	if c.held == nil {
		c.held = map[string]bool{}
	}
	if c.scopePod {
		c.held["pod/"+p.UID] = true
		return controllerclient.Lease{Key: "pod/" + p.UID, VNI: 3000, Scope: controllerclient.ScopePod}, nil
	}
	c.held["job/ns/j"] = true
	return controllerclient.Lease{Key: "job/ns/j", VNI: 2000, Scope: controllerclient.ScopeJob}, nil
}

func (c *countingLeaser) ReleaseJobVNI(_ context.Context, l controllerclient.Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releases++
	delete(c.held, l.Key)
	return nil
}

func (c *countingLeaser) calls() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acquires, c.releases
}

// A job's pods on one node cost one controller call while any of them
// holds its lease; the node's hold goes with the last; a pod-scoped
// answer is never shared; a pod of no known job always asks.
func TestSharedJobLeaseOneCallPerNodePerJob(t *testing.T) {
	ctx := context.Background()
	c := &countingLeaser{}
	l := NewLeases(c)
	share := ShareKey("ns", map[string]string{"batch.kubernetes.io/controller-uid": "job-uid"}, nil)
	if share == "" {
		t.Fatal("a Job's pod has no share key")
	}
	for _, pod := range []string{"ns/j-0", "ns/j-1", "ns/j-2"} {
		lease, err := l.AcquireShared(ctx, pod, controllerclient.PodRef{Namespace: "ns", Name: pod}, share)
		if err != nil || lease.VNI != 2000 || lease.Key != "job/ns/j" {
			t.Fatalf("%s: %+v, %v", pod, lease, err)
		}
	}
	if acq, _ := c.calls(); acq != 1 {
		t.Fatalf("%d controller calls for three pods of one job, want 1", acq)
	}
	if l.Holders("job/ns/j") != 3 {
		t.Fatalf("holders %d, want 3", l.Holders("job/ns/j"))
	}
	lease := controllerclient.Lease{Key: "job/ns/j", VNI: 2000, Scope: controllerclient.ScopeJob}
	for _, pod := range []string{"ns/j-0", "ns/j-1"} {
		if err := l.Release(ctx, pod, lease); err != nil {
			t.Fatal(err)
		}
	}
	if _, rel := c.calls(); rel != 0 {
		t.Fatal("the node's hold released while a pod of the job still runs")
	}
	if err := l.Release(ctx, "ns/j-2", lease); err != nil {
		t.Fatal(err)
	}
	if _, rel := c.calls(); rel != 1 {
		t.Fatal("the last pod's release did not release the node's hold")
	}
	// Nobody holds it now: the next pod asks the controller again.
	if _, err := l.AcquireShared(ctx, "ns/j-3", controllerclient.PodRef{Namespace: "ns", Name: "j-3"}, share); err != nil {
		t.Fatal(err)
	}
	if acq, _ := c.calls(); acq != 2 {
		t.Fatalf("%d calls, want a second after the lease was given back", acq)
	}
	// No share: every pod asks.
	if _, err := l.AcquireShared(ctx, "ns/x", controllerclient.PodRef{Namespace: "ns", Name: "x"}, ""); err != nil {
		t.Fatal(err)
	}
	if acq, _ := c.calls(); acq != 3 {
		t.Fatalf("%d calls, want a pod of no known job to ask", acq)
	}
}

func TestSharedLeaseNeverForPodScope(t *testing.T) {
	ctx := context.Background()
	c := &countingLeaser{scopePod: true}
	l := NewLeases(c)
	share := ShareKey("ns", map[string]string{"batch.kubernetes.io/controller-uid": "job-uid"}, map[string]string{"slingshot.hpe.com/vni": "pod"})
	for _, uid := range []string{"a", "b"} {
		if _, err := l.AcquireShared(ctx, "ns/"+uid, controllerclient.PodRef{Namespace: "ns", Name: uid, UID: uid}, share); err != nil {
			t.Fatal(err)
		}
	}
	if acq, _ := c.calls(); acq != 2 {
		t.Fatalf("%d calls for two pod-scoped pods, want each its own", acq)
	}
}

// A share key tells apart what the controller would answer differently.
func TestShareKey(t *testing.T) {
	job := map[string]string{"batch.kubernetes.io/controller-uid": "u1"}
	base := ShareKey("ns", job, nil)
	for name, other := range map[string]string{
		"another namespace": ShareKey("ns2", job, nil),
		"another job":       ShareKey("ns", map[string]string{"batch.kubernetes.io/controller-uid": "u2"}, nil),
		"a VNI policy":      ShareKey("ns", job, map[string]string{"slingshot.hpe.com/vni": "claim:x"}),
		"a network request": ShareKey("ns", job, map[string]string{"slingshot.hpe.com/network": `{"address":"10.0.0.5"}`}),
	} {
		if other == base {
			t.Errorf("%s: same share key %q", name, other)
		}
	}
	if ShareKey("ns", map[string]string{"app": "x"}, nil) != "" {
		t.Error("a pod of no Job has a share key")
	}
	if ShareKey("ns", map[string]string{"controller-uid": "u1"}, nil) == "" {
		t.Error("the pre-1.27 Job label is not read")
	}
}

// A pod that joins while the lease's last release is in flight asks the
// controller (which may have freed it) rather than join.
func TestSharedLeaseNotJoinedDuringRelease(t *testing.T) {
	h := newLeaseHolds()
	h.restore("job/ns/j", "ns/a")
	if !h.drop("job/ns/j", "ns/a") {
		t.Fatal("only holder's drop not last")
	}
	if h.join("job/ns/j", "ns/b") {
		t.Fatal("joined a lease whose release is in flight")
	}
	h.done("job/ns/j")
	if h.join("job/ns/j", "ns/b") {
		t.Fatal("joined a lease nobody holds")
	}
}

// gatedLeaser holds every acquire until open closes, counting them.
type gatedLeaser struct {
	countingLeaser
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedLeaser) AcquireJobVNI(ctx context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	g.entered <- struct{}{}
	<-g.open
	return g.countingLeaser.AcquireJobVNI(ctx, p)
}

// A gang start: a job's pods admitted on a node at once wait for the
// first's controller call and join its lease: one call, not one per pod.
func TestSharedLeaseGangStartOneCall(t *testing.T) {
	ctx := context.Background()
	g := &gatedLeaser{entered: make(chan struct{}, 16), open: make(chan struct{})}
	l := NewLeases(g)
	share := ShareKey("ns", map[string]string{"batch.kubernetes.io/controller-uid": "job-uid"}, nil)
	const pods = 8
	errs := make(chan error, pods)
	for i := range pods {
		go func() {
			pod := controllerclient.PodRef{Namespace: "ns", Name: "j-" + string(rune('a'+i))}
			lease, err := l.AcquireShared(ctx, "ns/"+pod.Name, pod, share)
			if err == nil && lease.VNI != 2000 {
				err = fmt.Errorf("lease %+v, want VNI 2000", lease)
			}
			errs <- err
		}()
	}
	<-g.entered // the first pod's call is in flight; the others wait on it
	close(g.open)
	for range pods {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if acq, _ := g.calls(); acq != 1 {
		t.Fatalf("%d controller calls for %d pods of one job admitted at once, want 1", acq, pods)
	}
	if l.Holders("job/ns/j") != pods {
		t.Fatalf("holders %d, want %d", l.Holders("job/ns/j"), pods)
	}
}

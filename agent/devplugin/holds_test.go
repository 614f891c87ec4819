package devplugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// jobController leases VNIs as the controller does for jobs: one lease per
// job, held by nodes, not pods (controller.Allocator.AcquireJobVNI and
// ReleaseJobVNI). A lease is freed when its job is gone and no node holds
// it; its VNI is then handed to the next new job at once (no quarantine),
// the worst case for a node that dropped its hold too early.
type jobController struct {
	mu     sync.Mutex
	leases map[string]*jobLease // by lease key
	free   []uint16             // freed VNIs, reused last in first out
	next   uint16
	// failAcquire, when set, fails the next acquire of a pod whose name
	// it returns true for.
	failAcquire func(pod string) bool
}

type jobLease struct {
	vni  uint16
	held bool // by this test's one node
	gone bool // the job was deleted
}

func newJobController() *jobController {
	return &jobController{leases: map[string]*jobLease{}, next: 1024}
}

// jobOf is a pod's job: its name up to the last "-".
func jobOf(pod string) string {
	if i := strings.LastIndex(pod, "-"); i > 0 {
		return pod[:i]
	}
	return pod
}

func (c *jobController) AcquireJobVNI(_ context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failAcquire != nil && c.failAcquire(p.Name) {
		return controllerclient.Lease{}, errors.New("controller unavailable")
	}
	key := "job/" + p.Namespace + "/" + jobOf(p.Name)
	l := c.leases[key]
	switch {
	case l != nil && l.gone:
		return controllerclient.Lease{}, fmt.Errorf("job %s is being deleted", key)
	case l == nil:
		l = &jobLease{vni: c.next}
		if n := len(c.free); n > 0 {
			l.vni, c.free = c.free[n-1], c.free[:n-1]
		} else {
			c.next++
		}
		c.leases[key] = l
	}
	l.held = true
	return controllerclient.Lease{Key: key, VNI: l.vni, Scope: controllerclient.ScopeJob}, nil
}

func (c *jobController) ReleaseJobVNI(_ context.Context, lease controllerclient.Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leases[lease.Key]; l != nil {
		l.held = false
		c.freeLocked(lease.Key)
	}
	return nil
}

// deleteJob marks a job gone, as its finalize hook does.
func (c *jobController) deleteJob(ns, job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := "job/" + ns + "/" + job
	if l := c.leases[key]; l != nil {
		l.gone = true
		c.freeLocked(key)
	}
}

func (c *jobController) freeLocked(key string) {
	if l := c.leases[key]; !l.held && l.gone {
		delete(c.leases, key)
		c.free = append(c.free, l.vni)
	}
}

// owner returns the job whose lease holds vni and whether the node holds
// it.
func (c *jobController) owner(vni uint16) (key string, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, l := range c.leases {
		if l.vni == vni {
			return k, l.held
		}
	}
	return "", false
}

// Issue 15, item 1: two pods of one job on one node; the first exits and
// the node's hold must stay, since the second still runs on the VNI. The
// job is then deleted and a new job starts: it must not get the VNI the
// second pod runs on. Before per-pod holds, the first pod's cleanup
// released the node's hold and the new job got the same VNI.
func TestItem1HoldOutlivesOnePodOfTheJob(t *testing.T) {
	ctl := newJobController()
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002, "uid-c": 4026532003})
	r.useLeaser(t, ctl)
	k := newFakeKubelet(t)
	w := r.useWatcher(k, nil)
	pa := kubeletPod{"ns", "train-0", "uid-a", "main", []string{dev0}}
	pb := kubeletPod{"ns", "train-1", "uid-b", "main", []string{dev1}}
	for _, p := range []kubeletPod{pa, pb} {
		k.admit(p)
		if err := r.b.PreStart(t.Context(), res, p.ids); err != nil {
			t.Fatal(err)
		}
	}
	vni := r.record(t, "ns/train-1").VNI

	k.remove(pa.uid)
	pollAndSweep(t, r, w)
	pollAndSweep(t, r, w)
	if r.has("ns/train-0") {
		t.Fatal("the exited pod was not cleaned up")
	}
	if key, held := ctl.owner(vni); key != "job/ns/train" || !held {
		t.Fatalf("after one pod of two exited, VNI %d is owned by %q held=%v; want job/ns/train held by the node", vni, key, held)
	}

	ctl.deleteJob("ns", "train") // its owner goes; pod train-1 is still terminating
	pc := kubeletPod{"ns", "other-0", "uid-c", "main", []string{dev0}}
	k.admit(pc)
	if err := r.b.PreStart(t.Context(), res, pc.ids); err != nil {
		t.Fatal(err)
	}
	if got := r.record(t, "ns/other-0").VNI; got == vni {
		t.Fatalf("a new job got VNI %d while a pod of the deleted job still runs on it", vni)
	}
}

// Issue 15, item 1: the second pod's bind fails and rolls back; the first
// pod of the job still runs, so the node's hold stays.
func TestItem1RollbackKeepsTheJobsHold(t *testing.T) {
	ctl := newJobController()
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002})
	r.useLeaser(t, ctl)
	k := newFakeKubelet(t)
	r.useWatcher(k, nil)
	pa := kubeletPod{"ns", "train-0", "uid-a", "main", []string{dev0}}
	k.admit(pa)
	if err := r.b.PreStart(t.Context(), res, pa.ids); err != nil {
		t.Fatal(err)
	}
	vni := r.record(t, "ns/train-0").VNI

	r.drvs["cxi1"] = failingCreate{r.drvs["cxi1"]}
	pb := kubeletPod{"ns", "train-1", "uid-b", "main", []string{dev1}}
	k.admit(pb)
	if err := r.b.PreStart(t.Context(), res, pb.ids); err == nil {
		t.Fatal("bind succeeded on a NIC that refuses services")
	}
	if r.has("ns/train-1") {
		t.Fatal("the failed bind left a record")
	}
	if key, held := ctl.owner(vni); key != "job/ns/train" || !held {
		t.Fatalf("after a rolled-back bind, VNI %d is owned by %q held=%v; want job/ns/train held by the node", vni, key, held)
	}
}

// failingCreate is a NIC that refuses new services.
type failingCreate struct{ engine.Driver }

func (failingCreate) Create(context.Context, cxi.ServiceSpec) (cxi.Service, error) {
	return cxi.Service{}, fmt.Errorf("create: %w", cxi.ErrNoResources)
}

func (failingCreate) CreateUnbound(context.Context, cxi.ServiceSpec) (cxi.Service, error) {
	return cxi.Service{}, fmt.Errorf("create: %w", cxi.ErrNoResources)
}

// Issue 15, item 5: the pod's network namespace is held open from the bind
// until its services are destroyed, so that its inode cannot pass to
// another namespace while a service names it. Before, the agent kept only
// the inode.
func TestItem5NamespaceHeldWhileServicesLive(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, netAB)
	k := newFakeKubelet(t)
	w := r.useWatcher(k, nil)
	bindAB(t, r, k)
	ha, _ := r.b.eng.Namespaces().Get("ns/a").(*fakeHandle)
	if ha == nil || ha.closed.Load() || r.b.eng.Namespaces().Held("ns/a") != netAB["uid-a"] {
		t.Fatalf("pod a's namespace is not held after its bind: %+v", ha)
	}
	// A container restart opens the namespace again and keeps one handle.
	if err := r.b.PreStart(t.Context(), res, kpodA.ids); err != nil {
		t.Fatal(err)
	}
	if r.b.eng.Namespaces().Held("ns/a") != netAB["uid-a"] {
		t.Fatal("pod a's namespace is not held after a container restart")
	}

	k.remove(kpodA.uid)
	pollAndSweep(t, r, w)
	pollAndSweep(t, r, w)
	if r.has("ns/a") {
		t.Fatal("pod a was not cleaned up")
	}
	if r.b.eng.Namespaces().Held("ns/a") != 0 || !ha.closed.Load() {
		t.Fatal("pod a's namespace is still held after its services were destroyed")
	}
	if r.b.eng.Namespaces().Held("ns/b") != netAB["uid-b"] {
		t.Fatal("pod b's namespace was let go with pod a's")
	}
}

// A restarted agent holds again the namespaces its live pods' services
// name.
func TestItem5NamespaceHeldAgainAfterRestart(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, nil, netAB)
	k := newFakeKubelet(t)
	r.useWatcher(k, nil)
	bindAB(t, r, k)

	r2 := newRig(t, dir, r.leaser, netAB)
	r2.useWatcher(k, nil)
	if _, err := r2.b.Reconcile(t.Context(), ReconcileOptions{}); err != nil {
		t.Fatal(err)
	}
	if r2.b.eng.Namespaces().Held("ns/a") != netAB["uid-a"] || r2.b.eng.Namespaces().Held("ns/b") != netAB["uid-b"] {
		t.Fatalf("after a restart: held a=%d b=%d", r2.b.eng.Namespaces().Held("ns/a"), r2.b.eng.Namespaces().Held("ns/b"))
	}
}

// metaNetns is fakeNetns whose handles carry what a runtime reports of
// the pod with its sandbox: the Job's label, and the pod's annotations.
type metaNetns struct {
	fakeNetns
	job         map[string]string            // pod UID → Job UID
	annotations map[string]map[string]string // pod UID → annotations; may be nil
}

type metaHandle struct {
	*fakeHandle
	labels, annotations map[string]string
}

func (h *metaHandle) PodMeta() (map[string]string, map[string]string) { return h.labels, h.annotations }

func (f metaNetns) Open(ctx context.Context, uid string) (nsHandle, error) {
	h, err := f.fakeNetns.Open(ctx, uid)
	if err != nil {
		return nil, err
	}
	return &metaHandle{fakeHandle: h.(*fakeHandle), labels: map[string]string{"batch.kubernetes.io/controller-uid": f.job[uid]},
		annotations: f.annotations[uid]}, nil
}

// countingJobs counts the controller's acquires.
type countingJobs struct {
	*jobController
	acquires atomic.Int64
}

func (c *countingJobs) AcquireJobVNI(ctx context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	c.acquires.Add(1)
	return c.jobController.AcquireJobVNI(ctx, p)
}

// Issue 25: the pods of one Job on a node cost one controller call: the
// runtime names each pod's Job (its sandbox's labels), and a pod of a Job
// whose lease the node holds joins it. Another Job's pod asks.
func TestOneControllerCallPerNodePerJob(t *testing.T) {
	ns := metaNetns{fakeNetns: fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002, "uid-c": 4026532003},
		job: map[string]string{"uid-a": "job-train", "uid-b": "job-train", "uid-c": "job-eval"}}
	r := newRig(t, t.TempDir(), nil, nil)
	r.b.netns = ns
	ctl := &countingJobs{jobController: newJobController()}
	r.useLeaser(t, ctl)
	k := newFakeKubelet(t)
	r.useWatcher(k, nil)
	for _, p := range []kubeletPod{
		{"ns", "train-0", "uid-a", "main", []string{dev0}},
		{"ns", "train-1", "uid-b", "main", []string{dev1}},
	} {
		k.admit(p)
		if err := r.b.PreStart(t.Context(), res, p.ids); err != nil {
			t.Fatal(err)
		}
	}
	a, b := r.record(t, "ns/train-0"), r.record(t, "ns/train-1")
	if a.VNI != b.VNI || a.LeaseKey != b.LeaseKey {
		t.Fatalf("two pods of one Job on VNIs %d and %d", a.VNI, b.VNI)
	}
	if n := ctl.acquires.Load(); n != 1 {
		t.Fatalf("%d controller calls for two pods of one Job on one node, want 1", n)
	}
	k.admit(kubeletPod{"ns", "eval-0", "uid-c", "main", []string{dev0}})
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	if c := r.record(t, "ns/eval-0"); c.VNI == a.VNI || ctl.acquires.Load() != 2 {
		t.Fatalf("another Job's pod: VNI %d (train's %d), %d calls; want its own VNI from a call of its own", c.VNI, a.VNI, ctl.acquires.Load())
	}
}

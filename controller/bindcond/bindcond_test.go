package bindcond

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

const driver = "cxi.slingshot.hpe.com"

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// pendingClaim is a claim as the scheduler leaves it before binding its
// pod: allocated devices of node-a carrying the binding conditions,
// reserved for pod train-0.
func pendingClaim(devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-c1"}}
	c.Status.Allocation = &resourceapi.AllocationResult{
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"node-a"}}},
		}}},
		AllocationTimestamp: ptr.To(metav1.NewTime(t0)),
	}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "nic", Driver: driver, Pool: "node-a", Device: d, ShareID: ptr.To(types.UID("share-" + d)),
			BindingConditions:        []string{draclaim.ConditionVNILeased},
			BindingFailureConditions: []string{draclaim.ConditionVNILeaseFailed},
		})
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0", UID: "uid-train-0"}}
	return c
}

func withConfig(c *resourceapi.ResourceClaim, raw string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)}}},
	}}
	return c
}

func withCondition(c *resourceapi.ResourceClaim, device, typ string) *resourceapi.ResourceClaim {
	c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: driver, Pool: "node-a", Device: device,
		ShareID:    ptr.To("share-" + device),
		Conditions: []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Reason: "x", LastTransitionTime: metav1.NewTime(t0)}}})
	return c
}

// TestAwaiting: only this driver's devices carrying VNILeased, and only
// until either condition is true in the status.
func TestAwaiting(t *testing.T) {
	other := pendingClaim("cxi0")
	other.Status.Allocation.Devices.Results[0].Driver = "gpu.example.com"
	plain := pendingClaim("cxi0")
	plain.Status.Allocation.Devices.Results[0].BindingConditions = nil
	unallocated := pendingClaim()
	unallocated.Status.Allocation = nil
	for _, tt := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []string
	}{
		{"two devices", pendingClaim("cxi0", "cxi1"), []string{"cxi0", "cxi1"}},
		{"one leased", withCondition(pendingClaim("cxi0", "cxi1"), "cxi0", draclaim.ConditionVNILeased), []string{"cxi1"}},
		{"one failed", withCondition(pendingClaim("cxi0", "cxi1"), "cxi1", draclaim.ConditionVNILeaseFailed), []string{"cxi0"}},
		{"another condition", withCondition(pendingClaim("cxi0"), "cxi0", "Ready"), []string{"cxi0"}},
		{"another driver", other, nil},
		{"no binding conditions", plain, nil},
		{"not allocated", unallocated, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range awaiting(tt.claim, driver) {
				got = append(got, d.Device)
				if d.ShareID != "share-"+d.Device {
					t.Errorf("device %s share %q, want the allocation's", d.Device, d.ShareID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("awaiting = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDecide: a claim is leased for its node with its configured policy,
// fails with a malformed configuration or a node not on one node, waits
// for its reservation, and fails on a node unheard for a stale period
// (a node never heard: once the claim has waited that long), where the
// controller has been up long enough to have heard it; one just loaded
// leases.
func TestDecide(t *testing.T) {
	const stale = 30 * time.Second
	heard := func(at time.Time) func(string) (time.Time, bool) {
		return func(string) (time.Time, bool) { return at, true }
	}
	never := func(string) (time.Time, bool) { return time.Time{}, false }
	loaded := t0.Add(-time.Hour)
	unreserved := pendingClaim("cxi0")
	unreserved.Status.ReservedFor = nil
	group := pendingClaim("cxi0")
	group.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "train", UID: "uid-train"}}
	nowhere := pendingClaim("cxi0")
	nowhere.Status.Allocation.NodeSelector = nil
	for _, tt := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		clock nodeClock
		want  verdict
	}{
		{"lease", pendingClaim("cxi0"), nodeClock{now: t0, loadedAt: loaded, seen: heard(t0.Add(-5 * time.Second)), stale: stale},
			verdict{lease: true, pod: controller.PodRef{Namespace: "ns", Name: "train-0", UID: "uid-train-0"}, node: "node-a"}},
		{"lease with the claim's policy", withConfig(pendingClaim("cxi0"), `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"pod"}`),
			nodeClock{now: t0, loadedAt: loaded, seen: heard(t0), stale: stale},
			verdict{lease: true, pod: controller.PodRef{Namespace: "ns", Name: "train-0", UID: "uid-train-0"}, node: "node-a", policy: "pod"}},
		{"malformed config", withConfig(pendingClaim("cxi0"), `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"everyone"}`),
			nodeClock{now: t0, loadedAt: loaded, seen: heard(t0), stale: stale}, verdict{failed: true, reason: ReasonInvalidConfig}},
		{"no node", nowhere, nodeClock{now: t0, loadedAt: loaded, seen: heard(t0), stale: stale}, verdict{failed: true, reason: ReasonInvalidConfig}},
		{"reserved for a PodGroup", group, nodeClock{now: t0, loadedAt: loaded, seen: heard(t0), stale: stale}, verdict{failed: true, reason: ReasonInvalidConfig}},
		{"not reserved yet", unreserved, nodeClock{now: t0, loadedAt: loaded, seen: heard(t0), stale: stale}, verdict{wait: true}},
		{"node unheard for long", pendingClaim("cxi0"), nodeClock{now: t0.Add(stale), loadedAt: loaded, seen: heard(t0.Add(-time.Minute)), stale: stale},
			verdict{failed: true, reason: ReasonNodeAgentUnreachable}},
		{"node never heard", pendingClaim("cxi0"), nodeClock{now: t0.Add(stale), loadedAt: loaded, seen: never, stale: stale},
			verdict{failed: true, reason: ReasonNodeAgentUnreachable}},
		{"controller just loaded", pendingClaim("cxi0"), nodeClock{now: t0, loadedAt: t0.Add(-10 * time.Second), seen: never, stale: stale},
			verdict{lease: true, pod: controller.PodRef{Namespace: "ns", Name: "train-0", UID: "uid-train-0"}, node: "node-a"}},
		{"claim just allocated", pendingClaim("cxi0"), nodeClock{now: t0.Add(29900 * time.Millisecond), loadedAt: loaded, seen: never, stale: stale},
			verdict{wait: true, retryAfter: 100 * time.Millisecond}},
		{"staleness off", pendingClaim("cxi0"), nodeClock{now: t0, loadedAt: loaded, seen: never},
			verdict{lease: true, pod: controller.PodRef{Namespace: "ns", Name: "train-0", UID: "uid-train-0"}, node: "node-a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.claim, driver, tt.clock)
			if got.failed && got.message == "" {
				t.Errorf("failed with no message")
			}
			got.message = ""
			if got != tt.want {
				t.Fatalf("decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// fakeLeaser answers acquires with err while it is set, else with vni.
type fakeLeaser struct {
	mu       sync.Mutex
	err      error
	vni      uint16
	acquired []string // "pod@node policy"
	seen     map[string]time.Time
}

func (f *fakeLeaser) AcquireJobVNIWithPolicy(_ context.Context, p controller.PodRef, node, policy string) (controller.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired = append(f.acquired, p.Name+"@"+node+" "+policy)
	if f.err != nil {
		return controller.Lease{}, f.err
	}
	return controller.Lease{Key: "job/ns/train", VNI: f.vni, Scope: "job"}, nil
}

func (f *fakeLeaser) NodeSeen(node string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.seen[node]
	return at, ok
}

func (f *fakeLeaser) Loaded() <-chan struct{} { c := make(chan struct{}); close(c); return c }

type written struct {
	devs []Device
	cond metav1.Condition
}

type fakeConditions struct {
	mu  sync.Mutex
	err error
	got []written
}

func (f *fakeConditions) WriteCondition(_ context.Context, _ *resourceapi.ResourceClaim, devs []Device, cond metav1.Condition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.got = append(f.got, written{devs, cond})
	return nil
}

func newWriter(t *testing.T, l *fakeLeaser, w *fakeConditions) *Writer {
	t.Helper()
	wr, err := New(nil, l, w, Options{Driver: driver, Attempts: 3, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return wr
}

// TestSyncLeasesThenWritesVNILeased: the claim's VNI is leased for its
// node before the condition says so, on every awaiting device.
func TestSyncLeasesThenWritesVNILeased(t *testing.T) {
	l := &fakeLeaser{vni: 1100, seen: map[string]time.Time{"node-a": t0}}
	w := &fakeConditions{}
	out := newWriter(t, l, w).Sync(context.Background(), pendingClaim("cxi0", "cxi1"), t0.Add(-time.Hour), 0)
	if out.wrote != draclaim.ConditionVNILeased || out.retry {
		t.Fatalf("outcome %+v, want VNILeased written", out)
	}
	if fmt.Sprint(l.acquired) != "[train-0@node-a ]" {
		t.Fatalf("acquired %v, want train-0's for node-a", l.acquired)
	}
	if len(w.got) != 1 || len(w.got[0].devs) != 2 || w.got[0].cond.Reason != ReasonLeased || !strings.Contains(w.got[0].cond.Message, "VNI 1100") {
		t.Fatalf("written %+v, want VNILeased naming VNI 1100 on cxi0 and cxi1", w.got)
	}
}

// TestSyncRefusalFailsTheBinding: a lease the controller refuses fails
// the binding with its reason; an unavailable controller is retried, and
// fails the binding only once the attempts are spent.
func TestSyncRefusalFailsTheBinding(t *testing.T) {
	l := &fakeLeaser{err: fmt.Errorf("lease: %w", controller.ErrExhausted), seen: map[string]time.Time{"node-a": t0}}
	w := &fakeConditions{}
	wr := newWriter(t, l, w)
	if out := wr.Sync(context.Background(), pendingClaim("cxi0"), t0.Add(-time.Hour), 0); out.wrote != draclaim.ConditionVNILeaseFailed {
		t.Fatalf("refused: outcome %+v, want VNILeaseFailed", out)
	}
	if c := w.got[0].cond; c.Reason != ReasonLeaseRefused || !strings.Contains(c.Message, "exhausted") {
		t.Fatalf("refused: condition %+v", c)
	}

	l.err = fmt.Errorf("%w: state is loading", controller.ErrUnavailable)
	w.got = nil
	for attempt := range 2 {
		if out := wr.Sync(context.Background(), pendingClaim("cxi0"), t0.Add(-time.Hour), attempt); !out.retry || len(w.got) != 0 {
			t.Fatalf("unavailable, attempt %d: outcome %+v, written %+v; want a retry and nothing written", attempt, out, w.got)
		}
	}
	if out := wr.Sync(context.Background(), pendingClaim("cxi0"), t0.Add(-time.Hour), 2); out.wrote != draclaim.ConditionVNILeaseFailed || w.got[0].cond.Reason != ReasonControllerUnavailable {
		t.Fatalf("unavailable, last attempt: outcome %+v, written %+v; want VNILeaseFailed ControllerUnavailable", out, w.got)
	}
}

// TestSyncUnreachableNodeLeasesNothing: a node whose agent is not heard
// gets no lease: its claim fails at once where the node was heard long
// ago, and after a stale period from its allocation where it never was.
func TestSyncUnreachableNodeLeasesNothing(t *testing.T) {
	l := &fakeLeaser{vni: 1100, seen: map[string]time.Time{"node-a": t0.Add(-time.Hour)}}
	w := &fakeConditions{}
	wr := newWriter(t, l, w)
	out := wr.Sync(context.Background(), pendingClaim("cxi0"), t0.Add(-time.Hour), 0)
	if out.wrote != draclaim.ConditionVNILeaseFailed || len(l.acquired) != 0 || w.got[0].cond.Reason != ReasonNodeAgentUnreachable {
		t.Fatalf("outcome %+v, acquired %v, written %+v; want NodeAgentUnreachable and no lease", out, l.acquired, w.got)
	}

	l.seen, w.got = nil, nil
	c := pendingClaim("cxi0")
	if out := wr.Sync(context.Background(), c, t0.Add(-time.Hour), 0); out.after == 0 || len(l.acquired) != 0 || len(w.got) != 0 {
		t.Fatalf("never heard, just allocated: outcome %+v, acquired %v, written %+v; want a look again later, nothing else", out, l.acquired, w.got)
	}
	c.Status.Allocation.AllocationTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	if out := wr.Sync(context.Background(), c, t0.Add(-time.Hour), 0); out.wrote != draclaim.ConditionVNILeaseFailed || len(l.acquired) != 0 {
		t.Fatalf("never heard, allocated a minute ago: outcome %+v, acquired %v; want NodeAgentUnreachable and no lease", out, l.acquired)
	}
}

// TestSyncWriteFailureRetries: a write that fails is retried; a claim
// whose conditions are written already is left alone.
func TestSyncWriteFailureRetries(t *testing.T) {
	l := &fakeLeaser{vni: 1100, seen: map[string]time.Time{"node-a": t0}}
	w := &fakeConditions{err: fmt.Errorf("apiserver down")}
	wr := newWriter(t, l, w)
	if out := wr.Sync(context.Background(), pendingClaim("cxi0"), t0.Add(-time.Hour), 0); !out.retry {
		t.Fatalf("outcome %+v, want a retry", out)
	}
	done := withCondition(pendingClaim("cxi0"), "cxi0", draclaim.ConditionVNILeased)
	if out := wr.Sync(context.Background(), done, t0.Add(-time.Hour), 0); out != (outcome{}) || len(l.acquired) != 1 {
		t.Fatalf("written claim: outcome %+v, acquires %v; want nothing done", out, l.acquired)
	}
}

func FuzzNodeOf(f *testing.F) {
	f.Add("metadata.name", "In", "node-a", 1)
	f.Fuzz(func(t *testing.T, key, op, value string, terms int) {
		sel := &v1.NodeSelector{}
		for range terms % 4 {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOperator(op), Values: []string{value}}}})
		}
		if n, ok := nodeOf(&resourceapi.AllocationResult{NodeSelector: sel}); ok && n != value {
			t.Fatalf("nodeOf = %q, want %q", n, value)
		}
	})
}

// TestRunWritesWaitingClaims: Run hears of a waiting claim through its
// watch, leases and writes once; a claim without the conditions is left
// alone; Run returns when its context ends.
func TestRunWritesWaitingClaims(t *testing.T) {
	waiting := pendingClaim("cxi0")
	plain := pendingClaim("cxi1")
	plain.Name, plain.UID = "plain", "uid-plain"
	plain.Status.Allocation.Devices.Results[0].BindingConditions = nil
	client := fake.NewClientset(waiting, plain)
	l := &fakeLeaser{vni: 1200, seen: map[string]time.Time{"node-a": time.Now()}}
	w := &fakeConditions{}
	wr, err := New(client, l, w, Options{Driver: driver})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- wr.Run(ctx) }()
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.got) > 0, nil
	})
	cancel()
	if err != nil {
		t.Fatalf("no condition written: %v", err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(w.got) != 1 || w.got[0].devs[0].Device != "cxi0" || w.got[0].cond.Type != draclaim.ConditionVNILeased {
		t.Fatalf("written %+v, want VNILeased on cxi0 only", w.got)
	}
	if fmt.Sprint(l.acquired) != "[train-0@node-a ]" {
		t.Fatalf("acquired %v, want the waiting claim's only", l.acquired)
	}
}

// TestSyncLeasesTheGroupClaimsVNI: with GroupClaims, a claim whose pod is
// in a PodGroup holding a claim of the fabric's VNI device leases that
// claim's VNI (as the agent's Prepare will), read from the API server;
// while the group claim is not allocated yet the claim is retried; a pod
// outside a group, or a claim that names its own scope, keeps its policy.
func TestSyncLeasesTheGroupClaimsVNI(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-0", UID: "uid-train-0"},
		Spec: v1.PodSpec{
			SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")},
			ResourceClaims: []v1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("c1")},
				{Name: "vni", ResourceClaimName: ptr.To("job-vni")}},
		}}
	group := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job-vni", UID: "uid-g"}}
	client := fake.NewClientset(pod, group)
	l := &fakeLeaser{vni: 1100, seen: map[string]time.Time{"node-a": t0}}
	w := &fakeConditions{}
	wr, err := New(client, l, w, Options{Driver: driver, Attempts: 3, GroupClaims: true, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if out := wr.Sync(ctx, pendingClaim("cxi0"), t0.Add(-time.Hour), 0); !out.retry || len(l.acquired) != 0 {
		t.Fatalf("group claim not allocated yet: outcome %+v, acquired %v; want a retry, no lease", out, l.acquired)
	}
	if out := wr.Sync(ctx, pendingClaim("cxi0"), t0.Add(-time.Hour), 2); out.wrote != draclaim.ConditionVNILeaseFailed ||
		w.got[0].cond.Reason != ReasonControllerUnavailable || !strings.Contains(w.got[0].cond.Message, "not allocated yet") {
		t.Fatalf("group claim still not allocated, last attempt: outcome %+v, written %+v; want VNILeaseFailed ControllerUnavailable saying why", out, w.got)
	}
	w.got = nil
	group.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "vni", Driver: driver, Pool: draclaim.FabricPool, Device: draclaim.VNIDevice}}}}
	group.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "train", UID: "uid-pg"}}
	if _, err := client.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, group, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := wr.Sync(ctx, pendingClaim("cxi0"), t0.Add(-time.Hour), 1); out.wrote != draclaim.ConditionVNILeased {
		t.Fatalf("outcome %+v, want VNILeased", out)
	}
	if out := wr.Sync(ctx, withConfig(pendingClaim("cxi1"), `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"pod"}`), t0.Add(-time.Hour), 0); out.wrote != draclaim.ConditionVNILeased {
		t.Fatalf("vni: pod: outcome %+v, want VNILeased", out)
	}
	want := []string{"train-0@node-a resourceclaim:job-vni/uid-g", "train-0@node-a pod"}
	if !slices.Equal(l.acquired, want) {
		t.Fatalf("acquired %q, want %q", l.acquired, want)
	}
}

// TestSyncTwoGroupClaimsFailsAtOnce: a pod naming two group claims is a
// mistake no retry mends: its binding fails with InvalidConfig at the
// first look, without a lease.
func TestSyncTwoGroupClaimsFailsAtOnce(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-0", UID: "uid-train-0"},
		Spec: v1.PodSpec{
			SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")},
			ResourceClaims: []v1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("c1")},
				{Name: "a", ResourceClaimName: ptr.To("vni-a")}, {Name: "b", ResourceClaimName: ptr.To("vni-b")}},
		}}
	objs := []runtime.Object{pod}
	for _, name := range []string{"vni-a", "vni-b"} {
		objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "vni", Driver: driver, Pool: draclaim.FabricPool, Device: draclaim.VNIDevice}}}},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "train", UID: "uid-pg"}},
			}})
	}
	l := &fakeLeaser{vni: 1100, seen: map[string]time.Time{"node-a": t0}}
	w := &fakeConditions{}
	wr, err := New(fake.NewClientset(objs...), l, w, Options{Driver: driver, Attempts: 3, GroupClaims: true, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	out := wr.Sync(t.Context(), pendingClaim("cxi0"), t0.Add(-time.Hour), 0)
	if out.wrote != draclaim.ConditionVNILeaseFailed || len(l.acquired) != 0 || w.got[0].cond.Reason != ReasonInvalidConfig || !strings.Contains(w.got[0].cond.Message, "vni-a, vni-b") {
		t.Fatalf("outcome %+v, acquired %v, written %+v; want InvalidConfig naming both claims, no lease", out, l.acquired, w.got)
	}
}

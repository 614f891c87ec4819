package e2e

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var (
	bindClaims = flag.Int("bindcond.claims", 2000, "claims (one pod each, of one Job) waiting for their binding conditions in TestBindingConditionsBacklog")
	bindNodes  = flag.Int("bindcond.nodes", 500, "nodes the claims of TestBindingConditionsBacklog are allocated on")
)

const (
	draDriver  = "cxi.slingshot.hpe.com"
	condLeased = "VNILeased"
)

// TestBindingConditionsBacklog: a Job's -bindcond.claims claims, spread
// over -bindcond.nodes nodes, each allocated a NIC whose device carries
// the binding conditions and reserved for its pod, as the scheduler
// leaves them while it waits to bind, wait for a controller that is down.
// slingshot-controller --dra-binding-conditions then starts: it writes
// VNILeased on every claim, through the real API server's validation of
// status.devices against the allocation, naming the Job's one VNI, and
// holds that VNI for every node the claims are on. The time from its start
// to the last condition is logged: the backlog a controller restart in a
// large cluster leaves.
func TestBindingConditionsBacklog(t *testing.T) { bindingBacklog(t, false) }

// TestBindingConditionsBacklogGroup is TestBindingConditionsBacklog with
// the Job's pods in one PodGroup holding one claim of the fabric's VNI
// device (KEP-5729), and the controller's --dra-podgroup-claims: each
// waiting claim now costs a read of its pod and of the group's claim, and
// every claim must name the group claim's lease, owned by that claim.
func TestBindingConditionsBacklogGroup(t *testing.T) { bindingBacklog(t, true) }

func bindingBacklog(t *testing.T, group bool) {
	ctx := t.Context()
	cs := kubeClient(t)
	ns := newNamespace(t, "bindcond")
	n, nodes := *bindClaims, *bindNodes
	// No controller-manager makes the namespace's default ServiceAccount,
	// which the pods' admission looks up.
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job, err := cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "rank", Image: "rank"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var groupClaim *resourcev1.ResourceClaim
	args := []string{"--store", "sqlite", "--db", filepath.Join(t.TempDir(), "controller.db"),
		"--dra-binding-conditions", draDriver, "--dra-node-stale", "1h"}
	if group {
		groupClaim = podGroupClaim(t, cs, ns, "train")
		args = append(args, "--dra-podgroup-claims")
	}
	start := time.Now()
	parallel(t, n, func(i int) error { return waitingClaim(ctx, cs, ns, job, groupClaim, i, nodeName(i%nodes)) })
	t.Logf("%d pods and their claims made, waiting, in %v", n, time.Since(start).Round(time.Millisecond))

	var logs lockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	})
	// Watched, not listed: a list of every claim every few milliseconds
	// would take the API server's time from the writes measured.
	initial, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: initial.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The nodes send no heartbeat here: a node-stale period longer than
	// the test keeps them from being judged unreachable.
	start = time.Now()
	r := startController(t, "bindcond", writeKubeconfig(t), &logs, args...)
	leased := map[string]bool{}
	var first time.Duration
	deadline := time.After(5 * time.Minute)
	for len(leased) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of the claims ended with %d of %d leased", len(leased), n)
			}
			if c, isClaim := ev.Object.(*resourcev1.ResourceClaim); isClaim && leasedCondition(c) != nil {
				if len(leased) == 0 {
					first = time.Since(start)
				}
				leased[c.Name] = true
			}
		case <-deadline:
			t.Fatalf("VNILeased on %d of %d claims after 5 minutes", len(leased), n)
		}
	}
	took := time.Since(start)
	t.Logf("controller start to VNILeased on the first claim %v, on all %d claims over %d nodes %v: %.0f claims/s after the first",
		first.Round(time.Millisecond), n, nodes, took.Round(time.Millisecond), float64(n-1)/(took-first).Seconds())

	list, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	messages := map[string]int{}
	for _, c := range list.Items {
		if groupClaim != nil && c.Name == groupClaim.Name {
			continue // its device carries no binding conditions
		}
		cond := leasedCondition(&c)
		if cond == nil {
			t.Errorf("claim %s: no VNILeased", c.Name)
			continue
		}
		// "VNI 1024 (job lease job/ns/uid) held for node node-00017".
		msg, _, _ := strings.Cut(cond.Message, " held for node ")
		messages[msg]++
		if len(c.Status.Devices) != 1 || c.Status.Devices[0].Driver != draDriver {
			t.Errorf("claim %s: status.devices %+v, want the one device's entry", c.Name, c.Status.Devices)
		}
	}
	if len(messages) != 1 {
		t.Fatalf("the Job's claims name %d leases, want one: %v", len(messages), messages)
	}
	vnis, err := r.client.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	owner := string(job.UID)
	if group {
		owner = string(groupClaim.UID)
	}
	var held []string
	for _, l := range vnis.GetLeases() {
		if l.GetOwner().GetUid() == owner {
			held = append(held, l.GetNodes()...)
		}
	}
	if len(held) != min(n, nodes) {
		t.Errorf("the lease of %s is held for %d nodes, want %d (every node a claim is on)", owner, len(held), min(n, nodes))
	}
}

// podGroupClaim makes PodGroup name and its claim of the fabric's VNI
// device, allocated and reserved for the group, as the scheduler leaves
// it once the group's first pod is scheduled.
func podGroupClaim(t *testing.T, cs kubernetes.Interface, ns, name string) *resourcev1.ResourceClaim {
	t.Helper()
	ctx := t.Context()
	pg, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}},
			ResourceClaims: []schedulingv1beta1.PodGroupResourceClaim{{Name: "vni", ResourceClaimName: ptr(name + "-vni")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-vni"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "vni",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "vni." + draDriver}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "vni", Driver: draDriver, Pool: "fabric", Device: "vni"}}},
		AllocationTimestamp: ptr(metav1.Now()),
	}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: pg.Name, UID: pg.UID}}
	if claim, err = cs.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return claim
}

// waitingClaim makes pod i of job and its claim, allocated device cxi0 of
// node and reserved for the pod, with the binding conditions, as the
// scheduler leaves a claim while it waits in PreBind.
func waitingClaim(ctx context.Context, cs kubernetes.Interface, ns string, job *batchv1.Job, group *resourcev1.ResourceClaim, i int, node string) error {
	name := fmt.Sprintf("train-%05d", i)
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "rank", Image: "rank"}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr(name + "-cxi")}}}
	if group != nil {
		// In the PodGroup the group claim is reserved for, naming it.
		spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr(group.Status.ReservedFor[0].Name)}
		spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: "vni", ResourceClaimName: ptr(group.Name)})
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr(true)}}},
		Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	claim, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-cxi"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "nic",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDriver}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "nic", Driver: draDriver, Pool: node, Device: "cxi0",
			BindingConditions: []string{condLeased}, BindingFailureConditions: []string{"VNILeaseFailed"},
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
		AllocationTimestamp: ptr(metav1.Now()),
	}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	_, err = cs.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	return err
}

func leasedCondition(c *resourcev1.ResourceClaim) *metav1.Condition {
	for _, d := range c.Status.Devices {
		if cond := apimeta.FindStatusCondition(d.Conditions, condLeased); d.Driver == draDriver && cond != nil && cond.Status == metav1.ConditionTrue {
			return cond
		}
	}
	return nil
}

// parallel runs do(0)…do(n-1) on 32 workers and fails t with the first
// error.
func parallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

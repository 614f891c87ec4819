package e2edra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// The binding conditions the chart's dra.bindingConditions puts on every
// NIC device, as the controller writes them (internal/draclaim).
const (
	condLeased = "VNILeased"
	condFailed = "VNILeaseFailed"
)

// TestDRABindingConditions, with the chart's dra.bindingConditions on:
//   - up: a Job's pod binds once the controller leased its claim's VNI for
//     the node, VNILeased on its device names the VNI its services carry;
//   - extended resource: so does the claim the scheduler makes for a pod
//     asking hpe.com/cxi: 1;
//   - down: with the controller stopped, a Job's pods are allocated NICs
//     and reserved their claims but not bound (the scheduler says it waits
//     for binding conditions), so the kubelet prepares nothing; once the
//     controller is back, they are bound and run, on one VNI;
//   - refused: a claim whose VNI the controller refuses (a VNIClaim that
//     does not exist) gets VNILeaseFailed, and its pod is sent back to the
//     scheduler's queue with the reason on it, never bound.
//
// The times are logged: the scheduler looks at a waiting pod every 5 s
// (kube-scheduler's dynamicresources PreBind), which bounds both the cost
// of the conditions for every pod and the time from the controller's
// return to the pods' start.
func TestDRABindingConditions(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	if err := env.SetBindingConditions(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
		defer cancel()
		if _, err := env.StartController(ctx); err != nil {
			t.Error(err)
		}
		if err := env.SetBindingConditions(ctx, false); err != nil {
			t.Error(err)
		}
	})
	ns := env.TestNamespace(t, "dra-bind")
	createTemplate(t, ns, "nic", "job")
	createTemplate(t, ns, "missing", "claim:no-such-vniclaim")

	var upVNI uint16
	t.Run("up", func(t *testing.T) {
		start := time.Now()
		job := cluster.ClaimJob("up", 1, "nic")
		env.WithServiceCheck(&job.Spec.Template.Spec)
		pods, err := env.RunJob(ctx, ns, job)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("creation to running, the controller up: %v", time.Since(start).Round(time.Millisecond))
		upVNI = checkLeasedPods(t, ctx, pods)[0]
	})

	t.Run("extended resource", func(t *testing.T) {
		// The claim the scheduler makes for hpe.com/cxi: 1 in the limits
		// waits for the same conditions.
		job := cluster.Job("ext", 1, 1)
		env.WithServiceCheck(&job.Spec.Template.Spec)
		pods, err := env.RunJob(ctx, ns, job)
		if err != nil {
			t.Fatal(err)
		}
		if vni := checkLeasedPods(t, ctx, pods)[0]; vni == upVNI {
			t.Errorf("Job ext got VNI %d, Job up's", vni)
		}
	})

	t.Run("down", func(t *testing.T) {
		if err := env.StopController(ctx); err != nil {
			t.Fatal(err)
		}
		job := cluster.ClaimJob("down", 2, "nic")
		env.WithServiceCheck(&job.Spec.Template.Spec)
		if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waiting := waitBindingPending(t, ctx, ns, "e2e-job=down", 2)
		// The scheduler looks again every 5 s: through more than one of
		// its looks, the pods stay unbound and their claims unleased.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 7*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "e2e-job=down"})
			if err != nil {
				return false, nil
			}
			for _, p := range list.Items {
				if p.Spec.NodeName != "" {
					return false, fmt.Errorf("pod %s bound to %s with the controller stopped", p.Name, p.Spec.NodeName)
				}
			}
			return false, nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		for _, name := range waiting {
			p, err := env.Node.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range podClaims(t, ctx, p) {
				if cond := condition(c, condLeased, condFailed); cond != nil {
					t.Errorf("pod %s, claim %s: %s with the controller stopped", name, c.Name, cond.Type)
				}
			}
		}
		asked := time.Now()
		back, err := env.StartController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := env.WaitRunning(ctx, ns, "e2e-job=down", 2)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(back)
		// Its readiness probe may report it Ready after it wrote the
		// conditions: the scale-up is the other end.
		t.Logf("controller scaled up to both pods running: %v; its pod seen Ready to both pods running: %v",
			time.Since(asked).Round(time.Millisecond), took.Round(time.Millisecond))
		// One look of the scheduler (5 s) and a start; a node whose
		// agent had to be heard first would take three heartbeats.
		if took > 12*time.Second {
			t.Errorf("the pods ran %v after the controller was back, want within one scheduler look and a start", took)
		}
		vnis := checkLeasedPods(t, ctx, pods)
		if vnis[0] != vnis[1] {
			t.Errorf("the Job's pods on VNIs %v, want one", vnis)
		}
		// Job up still runs on its VNI: the restarted controller kept
		// its lease.
		if vnis[0] == upVNI {
			t.Errorf("Job down got VNI %d, Job up's, which still runs", upVNI)
		}
	})

	t.Run("refused", func(t *testing.T) {
		job := cluster.ClaimJob("refused", 1, "missing")
		if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var msg string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := env.Node.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
			if err != nil {
				return false, nil
			}
			for _, e := range evs.Items {
				if strings.HasPrefix(e.InvolvedObject.Name, "refused-") && strings.Contains(e.Message, "LeaseRefused") {
					msg = e.Message
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no FailedScheduling event naming LeaseRefused on the pod: %v\n%s", err, env.Describe(ctx))
		}
		t.Logf("the pod is told: %s", msg)
		if !strings.Contains(msg, "no-such-vniclaim") {
			t.Errorf("the pod's event %q does not name the VNIClaim it asked for", msg)
		}
		list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "e2e-job=refused"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				t.Errorf("pod %s bound to %s, its VNI refused", p.Name, p.Spec.NodeName)
			}
		}
	})
}

// waitBindingPending waits until want pods match selector in ns, each
// told by the scheduler that it waits for its devices' binding
// conditions, and returns their names.
func waitBindingPending(t *testing.T, ctx context.Context, ns, selector string, want int) []string {
	t.Helper()
	var names []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) != want {
			return false, nil
		}
		names = names[:0]
		for _, p := range list.Items {
			evs, err := env.Node.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + p.Name + ",reason=BindingConditionsPending"})
			if err != nil || len(evs.Items) == 0 {
				return false, nil
			}
			names = append(names, p.Name)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%d pods %q waiting for binding conditions: %v\n%s", want, selector, err, env.Describe(ctx))
	}
	return names
}

// checkLeasedPods checks each running pod's services and that each of its
// claims' devices says VNILeased naming the VNI they carry; it returns
// the pods' job VNIs.
func checkLeasedPods(t *testing.T, ctx context.Context, pods []corev1.Pod) []uint16 {
	t.Helper()
	var vnis []uint16
	for _, p := range pods {
		v := viewDRAPod(t, ctx, p)
		checkBound(t, v)
		vnis = append(vnis, v.JobVNI())
		for _, c := range v.Claims {
			cond := condition(c, condLeased)
			if cond == nil || !strings.Contains(cond.Message, fmt.Sprintf("VNI %d ", v.JobVNI())) {
				t.Errorf("pod %s, claim %s: condition %+v, want %s naming VNI %d", v.Key, c.Name, cond, condLeased, v.JobVNI())
			}
		}
	}
	return vnis
}

// podClaims are the pod's claims as the API server has them now.
func podClaims(t *testing.T, ctx context.Context, p *corev1.Pod) []*resourcev1.ResourceClaim {
	t.Helper()
	m, err := env.PodClaims(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out []*resourcev1.ResourceClaim
	for _, c := range m {
		out = append(out, c)
	}
	return out
}

// condition is the first of types true on any of the claim's devices of
// the driver, or nil.
func condition(c *resourcev1.ResourceClaim, types ...string) *metav1.Condition {
	for _, d := range c.Status.Devices {
		if d.Driver != cluster.DRADriver {
			continue
		}
		for _, typ := range types {
			if cond := apimeta.FindStatusCondition(d.Conditions, typ); cond != nil && cond.Status == metav1.ConditionTrue {
				return cond
			}
		}
	}
	return nil
}

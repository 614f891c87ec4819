package e2edra

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// sharedJobs is how many one-pod Jobs share the node's NICs: twice the
// NICs, more than an exclusive NIC per claim allowed.
const sharedJobs = 2 * nics

// TestDRAClaimsShareNICs (issue 34): NICs are shared by claims
// (allowMultipleAllocations, one of a NIC's `services` per claim).
//   - Eight one-pod Jobs, each pod with a claim of its own, all run on the
//     4-NIC node, each with a service of its own admitting its pod's
//     namespace alone, each on its Job's own VNI.
//   - The same with eight pods asking hpe.com/cxi: 1 in their limits (the
//     extended resource's claims share the NICs alike).
//   - Four claims each asking for all of one NIC's services have the
//     NICs to themselves; a claim beyond the published capacity then
//     stays Pending with the scheduler's reason, and runs once a NIC is
//     given back.
func TestDRAClaimsShareNICs(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-share")
	createTemplate(t, ns, "nic", "job")

	for _, via := range []string{"claim template", "extended resource"} {
		var names []string
		vnis, svcs, onNIC := map[uint16]string{}, map[string]string{}, map[string]int{}
		for i := range sharedJobs {
			name := fmt.Sprintf("t%d", i)
			job := cluster.ClaimJob(name, 1, "nic")
			if via == "extended resource" {
				name = fmt.Sprintf("x%d", i)
				job = cluster.Job(name, 1, 1)
			}
			env.WithServiceCheck(&job.Spec.Template.Spec)
			pods, err := env.RunJob(ctx, ns, job)
			if err != nil {
				t.Fatalf("%s: Job %d of %d: %v", via, i+1, sharedJobs, err)
			}
			names = append(names, name)
			v := viewDRAPod(t, ctx, pods[0])
			checkBound(t, v)
			if other, ok := vnis[v.JobVNI()]; ok {
				t.Errorf("%s: pods %s and %s of two Jobs on one VNI %d", via, other, v.Key, v.JobVNI())
			}
			vnis[v.JobVNI()] = v.Key
			for _, s := range v.Services {
				k := svcKey(s.NIC, s.ID)
				if other, ok := svcs[k]; ok {
					t.Errorf("%s: service %s serves pods %s and %s", via, k, other, v.Key)
				}
				svcs[k] = v.Key
				onNIC[s.NIC]++
			}
		}
		t.Logf("%s: %d pods running, services per NIC %v, VNIs %d", via, sharedJobs, onNIC, len(vnis))
		if len(svcs) != sharedJobs {
			t.Errorf("%s: %d services for %d pods, want one each", via, len(svcs), sharedJobs)
		}
		for _, name := range names {
			if err := env.DeleteJob(ctx, ns, name); err != nil {
				t.Fatal(err)
			}
		}
		if err := env.WaitNICsFree(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A whole NIC each: every service of the NIC, by its PCI address.
	rs, err := env.WaitResourceSlices(ctx, env.PhysicalNICs())
	if err != nil {
		t.Fatal(err)
	}
	var whole []string
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			c, ok := d.Capacity["services"]
			bus := d.Attributes["resource.kubernetes.io/pciBusID"].StringValue
			if !ok || bus == nil || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
				t.Fatalf("device %s: not shared, or no services capacity or PCI address: %s", d.Name, describeAttributes(d))
			}
			name := "whole-" + d.Name
			tmpl := cluster.NICClaimTemplate(name, 1, "job")
			req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
			req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["resource.kubernetes.io"].pciBusID == %q`, *bus)}}}
			req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"services": c.Value}}
			if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := env.RunJob(ctx, ns, cluster.ClaimJob(name, 1, name)); err != nil {
				t.Fatalf("a claim of all of %s's %s services: %v", d.Name, c.Value.String(), err)
			}
			whole = append(whole, name)
		}
	}
	t.Logf("whole NICs held: %v", whole)

	// Nothing is left for one more claim: Pending, with the reason.
	beyond := cluster.ClaimJob("beyond", 1, "nic")
	env.WithServiceCheck(&beyond.Spec.Template.Spec)
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, beyond, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why, err := waitUnschedulable(ctx, ns, "e2e-job=beyond")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a claim beyond the capacity: %s", why)
	if err := env.DeleteJob(ctx, ns, whole[0]); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitRunning(ctx, ns, "e2e-job=beyond", 1)
	if err != nil {
		t.Fatal(err)
	}
	checkBound(t, viewDRAPod(t, ctx, pods[0]))
}

// waitUnschedulable waits until the one pod of selector in ns is marked
// unschedulable by the scheduler, and returns the scheduler's message; a
// pod bound to the node instead fails it.
func waitUnschedulable(ctx context.Context, ns, selector string) (string, error) {
	var why string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		p := list.Items[0]
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s, want it unschedulable", p.Name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				why = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("pods %q in %s unschedulable: %w\n%s", selector, ns, err, env.Describe(ctx))
	}
	return why, nil
}

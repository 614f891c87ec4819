package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUnusedHoldDropped: an agent that crashed after the controller leased
// a job VNI to its node, and before it recorded the lease, can never
// release it. The agent's heartbeats report the VNIs the node uses; the
// controller drops the node's hold on a lease they lack, and keeps the
// hold of the pod the node runs.
func TestUnusedHoldDropped(t *testing.T) {
	ctx := t.Context()
	job := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "solver", UID: "33333333-0000-4000-8000-000000000003", Controller: harness.Ptr(true)}
	lostJob := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "lost", UID: "44444444-0000-4000-8000-000000000004", Controller: harness.Ptr(true)}
	live := newPod("hpc", "solver-a", 1, job)
	lost := newPod("hpc", "lost-a", 1, lostJob)

	pki := harness.NewPKI(t)
	addr, svc := harness.StartControllerWith(t, ctx, pki, []*v1.Pod{live, lost}, []*metav1.OwnerReference{job, lostJob},
		controller.Config{HoldGrace: time.Second, SweepInterval: 100 * time.Millisecond})
	n := newNode(t, "node-a", 2, 1)
	n.StartKubelet(ctx)
	cert, key := pki.Issue(t, "slingshot-agent:node-a")
	n.StartAgent("--controller", addr, "--controller-ca-file", pki.CAFile, "--controller-cert-file", cert, "--controller-key-file", key,
		"--controller-heartbeat", "200ms")
	eventually(t, 10*time.Second, "node-a registered", func() (bool, string) {
		c, _ := n.Kubelet.Capacity(nicResource)
		return c == 2, itoa(c)
	})
	n.StartSandbox(live)
	if _, err := n.Kubelet.Admit(ctx, live); err != nil {
		t.Fatalf("admit %s: %v", live.Name, err)
	}
	// What the crashed agent left behind: a lease the controller records
	// node-a as holding, and node-a records nowhere.
	orphan, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: lost.Namespace, Name: lost.Name, UID: string(lost.UID)}, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	holders := func() map[string][]string {
		leases, _, err := svc.ListLeases()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, l := range leases {
			out[l.Owner.Name] = l.Nodes
		}
		return out
	}
	eventually(t, 20*time.Second, "the orphaned hold dropped", func() (bool, string) {
		h := holders()
		return len(h["lost"]) == 0, fmt.Sprint(h)
	})
	t.Logf("orphaned hold on vni %d dropped %v after the acquire (grace 1s, heartbeat 200ms, sweep 100ms)",
		orphan.VNI, time.Since(start).Round(10*time.Millisecond))
	// The same reports, past the same grace, name the live pod's VNI.
	if h := holders(); !slices.Equal(h["solver"], []string{"node-a"}) {
		t.Fatalf("the running pod's job lease is held by %v, want node-a", h["solver"])
	}
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// The agent's contract with the operator, as the README's Events section
// lists it.
const (
	cleanupTaintKey = "cxi.slingshot.hpe.com/cleanup-stuck"
)

// waitEvent waits for the agent's event of reason in ns on an object of
// kind (and name, when not "") and returns its message.
func waitEvent(t *testing.T, ctx context.Context, ns, kind, name, reason string) string {
	t.Helper()
	msg, err := env.WaitAgentEvent(ctx, ns, kind, name, reason)
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	t.Logf("event %s on %s %s: %s", reason, kind, name, msg)
	return msg
}

// TestBindRefusedEvent: a pod whose bind the agent refuses (hostNetwork:
// its only namespace is the host's) has the agent's own event, which says
// why and what to do.
func TestBindRefusedEvent(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "events-refused")
	job := cluster.Job("refused", 1, 1)
	job.Spec.Template.Spec.HostNetwork = true
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg := waitEvent(t, ctx, ns, "Pod", "", "CXIBindRefused")
	for _, want := range []string{"host network", "What to do"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event message %q lacks %q", msg, want)
		}
	}
}

// nodeTaints are the node's taint keys now.
func nodeTaints(ctx context.Context) ([]string, error) {
	n, err := env.Node.Client.CoreV1().Nodes().Get(ctx, env.Node.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key+":"+string(t.Effect))
	}
	return keys, nil
}

// waitTaint waits until the node carries the cleanup-stuck taint (on) or
// not, and returns the node's taints then.
func waitTaint(t *testing.T, ctx context.Context, on bool, within time.Duration) []string {
	t.Helper()
	var keys []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		var err error
		if keys, err = nodeTaints(ctx); err != nil {
			return false, nil
		}
		return slices.Contains(keys, cleanupTaintKey+":"+string(corev1.TaintEffectNoSchedule)) == on, nil
	})
	if err != nil {
		t.Fatalf("node taints %v: want the cleanup-stuck taint %v: %v\n%s", keys, on, err, env.Describe(ctx))
	}
	return keys
}

// TestCleanupStuckTaintsNode: a gone pod's service kept busy (a process
// still holding an LNI on it, simulated) past cleanup.drainAfter (10s on
// this suite's node) taints the node cleanup-stuck:NoSchedule, and the
// pod and the node are told; the job's VNI stays held meanwhile; once
// the service is free the agent destroys it, the taint goes, and the VNI
// is released.
func TestCleanupStuckTaintsNode(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "events-stuck")
	pods, err := env.RunJob(ctx, ns, cluster.Job("stuck", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := viewPod(t, pods[0], rep)
	if len(v.Services) != 1 {
		t.Fatalf("pod %s has services %+v, want 1", v.Key, v.Services)
	}
	svc := v.Services[0]
	dev, err := sim.Open(env.SimStateDir, svc.NIC, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := dev.SetInUse(svc.ID, 1); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, the service is freed, or the node would refuse
	// the next tests' pods.
	freed := false
	t.Cleanup(func() {
		if !freed {
			_ = dev.SetInUse(svc.ID, 0)
		}
	})
	before, err := nodeTaints(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := env.DeleteJob(ctx, ns, "stuck"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=stuck"); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	tainted := waitTaint(t, ctx, true, 2*time.Minute)
	t.Logf("tainted %s after the pod was gone: %v", time.Since(gone).Round(time.Second), tainted)
	for _, k := range before {
		if !slices.Contains(tainted, k) {
			t.Errorf("taint %s was lost when the agent tainted the node: %v", k, tainted)
		}
	}
	msg := waitEvent(t, ctx, metav1.NamespaceDefault, "Node", env.Node.Name, "CXINodeCleanupStuck")
	if !strings.Contains(msg, v.Key) {
		t.Errorf("the node's event %q does not name the pod %s", msg, v.Key)
	}
	if msg := waitEvent(t, ctx, ns, "Pod", pods[0].Name, "CXICleanupStuck"); !strings.Contains(msg, fmt.Sprintf("%s:%d", svc.NIC, svc.ID)) {
		t.Errorf("the pod's event %q does not name its service %s:%d", msg, svc.NIC, svc.ID)
	}
	if holders, err := env.VNIHolders(ctx, v.JobVNI()); err != nil || !slices.Contains(holders, env.Node.Name) {
		t.Errorf("VNI %d holders %v (%v) while its service is busy, want this node", v.JobVNI(), holders, err)
	}

	if err := dev.SetInUse(svc.ID, 0); err != nil {
		t.Fatal(err)
	}
	freed = true
	after := waitTaint(t, ctx, false, 2*time.Minute)
	if !slices.Equal(after, before) {
		t.Errorf("node taints %v after the taint went, want %v as before", after, before)
	}
	waitEvent(t, ctx, metav1.NamespaceDefault, "Node", env.Node.Name, "CXINodeCleanupDone")
	if _, err := waitCleanedUp(ctx, []string{v.Key}, v.JobVNI()); err != nil {
		t.Fatalf("cleanup after the service was freed: %v\n%s", err, env.Describe(ctx))
	}
}

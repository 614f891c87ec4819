package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// cleanupTaint is the agent's node taint while it cannot clean up.
const cleanupTaint = "cxi.slingshot.hpe.com/cleanup-stuck"

// patchTaints sets node's taints as the agent does (agent/kube.go): a JSON
// merge patch of the whole, atomic list, valid only on the resourceVersion
// it was computed from.
func patchTaints(ctx context.Context, c kubernetes.Interface, node string, change func([]corev1.Taint) []corev1.Taint, labels map[string]string) error {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	taints := change(slices.Clone(n.Spec.Taints))
	if taints == nil {
		taints = []corev1.Taint{}
	}
	p := map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion}, "spec": map[string]any{"taints": taints}}
	if labels != nil {
		p["metadata"].(map[string]any)["labels"] = labels
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

func addCleanup(ts []corev1.Taint) []corev1.Taint {
	return append(ts, corev1.Taint{Key: cleanupTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
}

func dropCleanup(ts []corev1.Taint) []corev1.Taint {
	return slices.DeleteFunc(ts, func(t corev1.Taint) bool { return t.Key == cleanupTaint })
}

// Issue 26: the agent taints its node cleanup-stuck and writes events in
// both modes. Under the chart's ClusterRole and its node policy on a real
// API server, an agent adds and removes that taint on its own node, other
// taints kept; it may not touch another node, another taint, or the
// node's labels; a patch computed from a stale resourceVersion is a
// conflict (the agent reads again); it may write events.
func TestIssue26AgentTaintsOnlyItsOwnNode(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "taints")
	applyAgentSlicePolicy(t, ns) // the agent's objects of the chart, both policies included
	admin := kubeClient(t)
	mine, other := ns+"-n1", ns+"-n2"
	maintenance := corev1.Taint{Key: "example.com/maintenance", Value: "x", Effect: corev1.TaintEffectNoExecute}
	for _, n := range []string{mine, other} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": "a"}}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{maintenance}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}) })
	}
	user := "system:serviceaccount:" + ns + ":" + agentName
	waitAccess(t, user, authzv1.ResourceAttributes{Verb: "patch", Resource: "nodes"}, true)
	waitAccess(t, user, authzv1.ResourceAttributes{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: "default"}, true)
	agent := newClient(t, tokenConfig(agentToken(t, ns, mine)))

	// The policy takes effect once loaded: until the agent's patch of
	// another node is refused, undo what got through.
	eventually(t, 30*time.Second, "the policy refuses another node", func() (bool, string) {
		err := patchTaints(ctx, agent, other, addCleanup, nil)
		if err == nil {
			_ = patchTaints(ctx, admin, other, dropCleanup, nil)
			return false, "patched"
		}
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), err.Error()
	})
	refusedBy(t, "taint another node", patchTaints(ctx, agent, other, addCleanup, nil), "may only change its own node")

	if err := patchTaints(ctx, agent, mine, addCleanup, nil); err != nil {
		t.Fatalf("taint its own node: %v", err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, mine, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (The API server added node.kubernetes.io/not-ready at the node's
	// creation: taints the agent does not own are kept, whoever put them.)
	others := dropCleanup(slices.Clone(n.Spec.Taints))
	if !slices.Contains(n.Spec.Taints, maintenance) || len(others) != len(n.Spec.Taints)-1 {
		t.Fatalf("taints %+v, want the maintenance taint kept and the cleanup-stuck one added", n.Spec.Taints)
	}
	refusedBy(t, "drop another taint", patchTaints(ctx, agent, mine, func(ts []corev1.Taint) []corev1.Taint {
		return slices.DeleteFunc(ts, func(t corev1.Taint) bool { return t.Key == maintenance.Key })
	}, nil), "may only add or remove its node's cxi.slingshot.hpe.com/cleanup-stuck taint")
	refusedBy(t, "change the node's labels", patchTaints(ctx, agent, mine, func(ts []corev1.Taint) []corev1.Taint { return ts },
		map[string]string{"zone": "b"}), "may only add or remove")

	// A patch on a stale resourceVersion is a conflict, never a lost write.
	stale := n.ResourceVersion
	if err := patchTaints(ctx, admin, mine, func(ts []corev1.Taint) []corev1.Taint { return ts }, map[string]string{"zone": "a", "touched": "1"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": stale}, "spec": map[string]any{"taints": []corev1.Taint{maintenance}}})
	if _, err := agent.CoreV1().Nodes().Patch(ctx, mine, types.MergePatchType, b, metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("a patch on a stale resourceVersion: %v, want a conflict", err)
	}

	if err := patchTaints(ctx, agent, mine, dropCleanup, nil); err != nil {
		t.Fatalf("remove the taint from its own node: %v", err)
	}
	if n, err = admin.CoreV1().Nodes().Get(ctx, mine, metav1.GetOptions{}); err != nil || !slices.Equal(n.Spec.Taints, others) {
		t.Fatalf("taints %+v (%v), want %+v: the others, as they were", n.Spec.Taints, err, others)
	}

	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: "default"},
		EventTime:  metav1.NowMicro(), ReportingController: "slingshot.hpe.com/slingshot-agent", ReportingInstance: mine,
		Action: "Taint", Reason: "CXINodeCleanupStuck", Type: corev1.EventTypeWarning, Note: "test",
		Regarding: corev1.ObjectReference{Kind: "Node", Name: mine, UID: types.UID(mine)},
	}
	created, err := agent.EventsV1().Events("default").Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the agent writes an event on its node: %v", err)
	}
	_ = admin.EventsV1().Events("default").Delete(ctx, created.Name, metav1.DeleteOptions{})
}

package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestControllerRestart (issue 24, defect 9): the controller's pod is
// deleted and replaced. The agent reconnects within its capped backoff
// (gRPC's default grew to 120 s): a new Job's pod, which needs a lease
// from the new controller, runs with a VNI of its own. The time from the
// new controller being ready to the pod running is logged.
func TestControllerRestart(t *testing.T) {
	ctx := t.Context()
	c := env.Node.Client.CoreV1().Pods(cluster.Namespace)
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"}
	old, err := c.List(ctx, sel)
	if err != nil || len(old.Items) != 1 {
		t.Fatalf("controller pods: %v, %v", old, err)
	}
	if err := c.Delete(ctx, old.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitReplaced(ctx, cluster.Namespace, sel.LabelSelector, old.Items[0].UID); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	ns := env.TestNamespace(t, "ctl-restart")
	pods, err := env.RunJob(ctx, ns, cluster.Job("after", 1, 1))
	if err != nil {
		t.Fatalf("a pod after the controller restart: %v\n%s", err, env.Describe(ctx))
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := viewPod(t, pods[0], rep)
	checkIsolated(t, v, 1)
	t.Logf("pod bound on VNI %d %v after the new controller was ready", v.JobVNI(), time.Since(ready).Round(10*time.Millisecond))
}

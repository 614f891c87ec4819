package e2e

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestInstall: the chart's controller and agent become Ready on the node,
// and the node advertises every NIC share.
func TestInstall(t *testing.T) {
	ctx := t.Context()
	c := env.Node.Client
	ds, err := c.AppsV1().DaemonSets(cluster.Namespace).Get(ctx, cluster.ReleaseName+"-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.NumberReady != 1 || ds.Status.DesiredNumberScheduled != 1 {
		t.Errorf("agent DaemonSet: %d of %d ready, want 1 of 1", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	}
	dep, err := c.AppsV1().Deployments(cluster.Namespace).Get(ctx, cluster.ReleaseName+"-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !available(dep) {
		t.Errorf("controller Deployment not available: %+v", dep.Status)
	}
	if err := env.WaitAllocatable(ctx, env.Capacity); err != nil {
		t.Error(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Ready || len(rep.NICs) != len(env.Machine.NICs) {
		t.Errorf("agent report: ready=%v, %d NICs; want ready with %d", rep.Ready, len(rep.NICs), len(env.Machine.NICs))
	}
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == "True" && d.Status.ReadyReplicas == 1
		}
	}
	return false
}

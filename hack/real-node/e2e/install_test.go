package e2e

import (
	"os"
	"path/filepath"
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
	// The init container installed slingshot-ipam into the CNI bin dir,
	// and the agent serves its IPAM socket, both under the node's root.
	if fi, err := os.Stat(filepath.Join(env.CNIBinDir, "slingshot-ipam")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("slingshot-ipam in %s: %v, %v; want an executable installed by the agent's init container", env.CNIBinDir, fi, err)
	}
	if fi, err := os.Stat(env.IPAMSocket); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the agent's IPAM socket %s: %v, %v", env.IPAMSocket, fi, err)
	}
	if rep.IPAM == nil || len(rep.IPAM.Pools) != 1 || rep.IPAM.Pools[0].Name != cluster.IPPool {
		t.Errorf("agent report: IPAM %+v, want pool %s", rep.IPAM, cluster.IPPool)
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

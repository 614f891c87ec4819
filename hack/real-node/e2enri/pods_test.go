package e2enri

import (
	"slices"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestNRIJobPods: a Job of two pods, each holding both NICs, runs with
// NRI on. Each container's environment, read from its process, names its
// services and the Job's VNI, and agrees with the agent's env file; those
// services, as the driver holds them and as the agent reports them, are
// enabled, admit the pod's network namespace alone and carry the VNI
// (checkNRIBound). As containerd holds the containers, the kubelet asked
// for no CDI device and set none of the late-bound variables, and the
// agent wrote no CDI spec. Deleting the Job destroys the services and
// releases the VNI.
func TestNRIJobPods(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "nri-pods")
	specsBefore := cdiSpecs(t)
	pods, err := env.RunJob(ctx, ns, cluster.Job("a", 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var vni uint16
	for i, p := range pods {
		v := viewPod(t, p, rep)
		checkNRIBound(t, ctx, p, v, 2)
		if i > 0 && v.JobVNI() != vni {
			t.Errorf("pods of one Job on VNIs %d and %d", vni, v.JobVNI())
		}
		vni = v.JobVNI()
		t.Logf("pod %s: namespace %d, %v", v.Key, v.Netns, v.Env)
	}
	for _, p := range cdiSpecs(t) {
		if !slices.Contains(specsBefore, p) {
			t.Errorf("the agent wrote the CDI spec %s for the pods; with NRI it writes none", p)
		}
	}

	if err := env.DeleteJob(ctx, ns, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=a"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCleanedUp(ctx, cluster.Cleanup{
		VNI: vni, Leftovers: []cluster.Leftover{env.ReportedPods(podKeys(pods)), env.DriverVNIGone(vni)},
		Interval: 200 * time.Millisecond, Timeout: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
}

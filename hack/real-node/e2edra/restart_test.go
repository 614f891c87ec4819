package e2edra

import (
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// TestDRARestarts: with a Job's two pods running on claims, the kubelet
// is restarted, then the agent (its pod deleted; the DaemonSet makes a new
// one). Through both and for a while after each, the pods' services (IDs,
// state, members, VNIs), their claims' CDI specs and the controller's
// hold on the job VNI stay as they were, and the pods keep running. A pod
// of a new Job created afterwards is prepared and bound as usual, on a VNI
// of its own.
func TestDRARestarts(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-restart")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("r", 2, "nic")
	env.WithServiceCheck(&job.Spec.Template.Spec)
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		checkBound(t, viewDRAPod(t, ctx, p))
	}
	before := captureDRA(t, ctx, pods)
	if len(before.Services) != 2 || len(before.Specs) == 0 || len(before.Holders) != 1 {
		t.Fatalf("before the restarts: services %v, CDI specs %v, VNI %d held by %v", before.Services, before.Specs, before.JobVNI, before.Holders)
	}

	// The kubelet: stopped, started; it finds the plugin's registration
	// socket again.
	if err := env.Node.Kubelet.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := env.Node.Kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	if err := env.Node.WaitNodeReady(ctx); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, ctx, before, 6*time.Second)
	t.Log("kubelet restarted: state kept")

	// The agent: its pod deleted and replaced.
	if err := env.ReplaceAgentPod(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitResourceSlices(ctx, env.PhysicalNICs()); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, ctx, before, 6*time.Second)
	t.Log("agent restarted: state kept")

	// The pods ran through both, their containers never restarted.
	now, err := env.WaitRunning(ctx, ns, "e2e-job=r", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range now {
		if !samePod(p, pods) {
			t.Errorf("pod %s (uid %s) is not one of the Job's pods before the restarts", p.Name, p.UID)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("pod %s: container restarted %d times", p.Name, cs.RestartCount)
			}
		}
	}

	// A pod made afterwards is prepared and bound.
	after := cluster.ClaimJob("after", 1, "nic")
	env.WithServiceCheck(&after.Spec.Template.Spec)
	afterPods, err := env.RunJob(ctx, ns, after)
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, afterPods[0])
	checkBound(t, v)
	if v.JobVNI() == before.JobVNI {
		t.Errorf("a second Job's pod on the first Job's VNI %d", v.JobVNI())
	}
	t.Logf("pod %s after the restarts: NICs %v, VNI %d, services %v", v.Key, v.Allocated, v.JobVNI(), v.Services)

	// Deleting both Jobs cleans up all of it.
	var svcs []simstate.Service
	for _, s := range before.Services {
		svcs = append(svcs, s)
	}
	svcs = append(svcs, v.Services...)
	var claims []*resourcev1.ResourceClaim
	for _, p := range now {
		cl, err := env.PodClaims(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cl {
			claims = append(claims, c)
		}
	}
	claims = append(claims, v.Claims...)
	specs := before.Specs
	for _, c := range v.Claims {
		specs = append(specs, claimSpecs(t, c)...)
	}
	for _, name := range []string{"r", "after"} {
		if err := env.DeleteJob(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"r", "after"} {
		if _, err := env.WaitPodsGone(ctx, ns, "e2e-job="+name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := waitDRACleanedUp(ctx, svcs, specs, claims, before.JobVNI); err != nil {
		t.Fatal(err)
	}
	if _, err := waitDRACleanedUp(ctx, nil, nil, nil, v.JobVNI()); err != nil {
		t.Fatal(err)
	}
}

func samePod(p corev1.Pod, pods []corev1.Pod) bool {
	for _, q := range pods {
		if q.UID == p.UID {
			return true
		}
	}
	return false
}

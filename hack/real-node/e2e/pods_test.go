package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestJobPodsShareVNI: the two pods of a Job see one VNI, in their
// environment (CDI) and in the env file; a second Job's pods see another.
// Each pod's service admits exactly its own network namespace, the inode
// the host sees in /proc/<pid>/ns/net, and the job's VNI.
func TestJobPodsShareVNI(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "share")
	podsA, err := env.RunJob(ctx, ns, cluster.Job("a", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	podsB, err := env.RunJob(ctx, ns, cluster.Job("b", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vniOf := func(pods []corev1.Pod) uint16 {
		var vni uint16
		for i, p := range pods {
			v := viewPod(t, p, rep)
			checkIsolated(t, v, 1)
			if i > 0 && v.JobVNI() != vni {
				t.Errorf("pods of one Job on VNIs %d and %d", vni, v.JobVNI())
			}
			vni = v.JobVNI()
		}
		return vni
	}
	a, b := vniOf(podsA), vniOf(podsB)
	if a == b {
		t.Errorf("two Jobs share VNI %d", a)
	}
	t.Logf("job a: VNI %d, job b: VNI %d", a, b)
}

// TestJobDeletedCleansUp: deleting the Job destroys every service and
// releases the node's hold within 2 s of the pods being gone, and the VNI
// waits out its quarantine before it can be handed out again.
func TestJobDeletedCleansUp(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "cleanup")
	pods, err := env.RunJob(ctx, ns, cluster.Job("gone", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vni := viewPod(t, pods[0], rep).JobVNI()
	if len(jobSpecs(t, vni)) == 0 {
		t.Fatal("no CDI spec written for the pods")
	}
	if err := env.DeleteJob(ctx, ns, "gone"); err != nil {
		t.Fatal(err)
	}
	gone, err := env.WaitPodsGone(ctx, ns, "e2e-job=gone")
	if err != nil {
		t.Fatal(err)
	}
	clean, err := waitCleanedUp(ctx, podKeys(pods), vni)
	if err != nil {
		t.Fatal(err)
	}
	lag := max(0, clean.Sub(gone))
	t.Logf("services destroyed and hold released %s after the pods were gone from the API", lag.Round(time.Millisecond))
	if lag > 2*time.Second {
		t.Errorf("cleanup took %s after the pods were gone, want at most 2 s", lag)
	}
	for _, p := range jobSpecs(t, vni) {
		t.Errorf("CDI spec %s left after the pods' cleanup", p)
	}
	// The Job is gone and no node holds its VNI: the controller frees it
	// into quarantine, and a new Job gets another.
	if _, err := env.WaitCleanedUp(ctx, cluster.Cleanup{
		Leftovers: []cluster.Leftover{env.VNIsQuarantined(vni)},
		Interval:  200 * time.Millisecond, Timeout: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	next, err := env.RunJob(ctx, ns, cluster.Job("next", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep, err = env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := viewPod(t, next[0], rep).JobVNI(); got == vni {
		t.Errorf("VNI %d handed out again during its quarantine", vni)
	}
}

// TestKubeletRestart: the kubelet stopped (SIGTERM, then SIGKILL) and
// started again with pods running: services, env files, CDI specs and the
// VNI's hold are all kept; the pods deleted afterwards are cleaned up.
func TestKubeletRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			restartKeeps(t, "kubelet", func(t *testing.T) {
				if err := env.Node.Kubelet.Stop(sig, 30*time.Second); err != nil {
					t.Fatal(err)
				}
				if err := env.Node.Kubelet.Start(); err != nil {
					t.Fatal(err)
				}
				if err := env.Node.WaitNodeReady(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestAgentPodDeleted: the agent's pod deleted; the DaemonSet makes a new
// one, which adopts the running pods' services.
func TestAgentPodDeleted(t *testing.T) {
	restartKeeps(t, "agent", func(t *testing.T) {
		if err := env.ReplaceAgentPod(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContainerdRestart: containerd stopped and started with pods running.
func TestContainerdRestart(t *testing.T) {
	restartKeeps(t, "containerd", func(t *testing.T) {
		if err := env.Node.Containerd.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := env.Node.Containerd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := env.Node.WaitNodeReady(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// restartKeeps runs a Job of two pods, restarts a component with
// restart, and checks that nothing of the pods changed, through the
// restart and for a while after it (the window in which a kubelet lists no
// pods); then deletes the Job and checks the cleanup.
func restartKeeps(t *testing.T, what string, restart func(t *testing.T)) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "restart-"+what)
	pods, err := env.RunJob(ctx, ns, cluster.Job("r", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	before := captureState(t, ctx, pods)
	if len(before.Services) != 2 || len(before.CDISpecs) == 0 || len(before.Holders) != 1 {
		t.Fatalf("before the restart: %d services, CDI specs %v, VNI %d held by %v", len(before.Services), before.CDISpecs, before.JobVNI, before.Holders)
	}
	for k, h := range before.HSN {
		if !strings.HasPrefix(h, cluster.HSNInterface+" ") || !strings.Contains(h, "| "+cluster.HSNInterface+" macvlan up=true [") {
			t.Fatalf("before the restart: pod %s's hsn interface %q, want it reported and in its namespace", k, h)
		}
	}
	restart(t)
	if err := env.WaitAllocatable(ctx, env.Capacity); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, ctx, pods, before, 6*time.Second)
	if _, err := env.WaitRunning(ctx, ns, "e2e-job=r", 2); err != nil {
		t.Fatal(err)
	}
	if err := env.DeleteJob(ctx, ns, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=r"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitCleanedUp(ctx, podKeys(pods), before.JobVNI); err != nil {
		t.Fatal(err)
	}
	for _, p := range jobSpecs(t, before.JobVNI) {
		t.Errorf("CDI spec %s left after the pods' cleanup", p)
	}
}

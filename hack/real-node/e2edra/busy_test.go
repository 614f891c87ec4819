package e2edra

import (
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRADestroyBusyAtSandbox (issue 32): the sandbox of a pod on a claim
// of two NICs is made again (its pause process killed) while the agent
// runs, and the simulated driver answers EBUSY to every destroy on the
// claim's NICs for 5 s from the first. The bind at the new sandbox has to
// replace the services that admit the old namespace (destroy, then make
// again) and cannot within its budget (1.5 s, under containerd's 2 s per
// NRI request): the sandbox is refused, and the kubelet makes it again.
// Meanwhile no container of the pod runs on services that do not admit
// its namespace (a ServiceWatch with WorkloadsBound, every 100 ms), and
// once the driver destroys again the pod runs, its container started on
// services bound to its new namespace (checkBound, its svccheck lines).
func TestDRADestroyBusyAtSandbox(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-busy")
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.NICClaimTemplate("two", 2, "pod"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := cluster.AlwaysRestarting(cluster.ClaimJob("busy", 1, "two"))
	env.WithServiceCheck(&pod.Spec)
	running, err := env.RunPod(ctx, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, running)
	checkBound(t, v)
	if t.Failed() {
		t.FailNow()
	}
	w, err := env.WatchServices(ctx, cluster.WatchInterval, env.WatchedPods(t, []corev1.Pod{running}), cluster.WatchOptions{WorkloadsBound: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })

	const busyFor = 5 * time.Second
	fault, err := env.FaultFor(ctx, v.Devices, sim.Fault{Op: uapi.OpSvcDestroy, Errno: syscall.EBUSY}, busyFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Wait() })
	old, err := cluster.KillSandbox(v.UID)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("pod %s: pause pid %d killed; its services %v admit namespace %d", v.Key, old.Pid, v.SvcIDs, old.Netns)
	// The refusal reaches the pod's events: the agent's, or the runtime's
	// error, which carries the agent's.
	why := waitPodWarning(t, ctx, ns, running.Name, "refusing its sandbox while the destroy is busy", func(msg string) bool {
		return strings.Contains(msg, "sandbox was refused") || strings.Contains(msg, "slingshot:")
	})
	now, sb, err := env.WaitRunningAgain(ctx, running, old)
	if err != nil {
		t.Fatal(err)
	}
	first, cleared, fired, err := fault.Wait()
	if err != nil {
		t.Error(err)
	}
	if fired == 0 || first.IsZero() {
		t.Fatalf("no destroy met the fault: the bind at the new sandbox replaced nothing (event: %s)", why)
	}
	t.Logf("destroy answered EBUSY %d times, from %s after the kill for %s; the pod ran again in namespace %d, seen %s after the kill",
		fired, first.Sub(killed).Round(time.Millisecond), cleared.Sub(first).Round(time.Millisecond), sb.Netns, time.Since(killed).Round(time.Millisecond))
	w.Stop().Check(t, cluster.WatchInterval)
	checkBound(t, viewDRAPod(t, ctx, now))
}

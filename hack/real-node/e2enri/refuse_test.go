package e2enri

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestNRIRefusesUnboundContainer: a pod's service destroyed behind the
// agent's back after the kubelet's PreStartContainer bound it and before
// the runtime creates the container (by the hook, an NRI plugin that
// containerd calls before the agent's: a driver reload in that window)
// makes the agent refuse the container at CreateContainer. The agent's
// CXIBindRefused event on the pod names the service and its NIC, the
// kubelet reports the failed creation, and the container is neither made
// nor started (the runtime tells the hook of no post-create or start)
// until the kubelet's retry, whose PreStartContainer makes and binds a
// service again before the runtime's next CreateContainer, which the agent
// lets through: the pod runs bound, in the same sandbox, its environment
// naming the service it has now.
//
// PreStartContainer makes a recorded service the driver lost again, so a
// restart of the container alone would never meet the refusal: the hook
// is what reaches the window between the two calls.
func TestNRIRefusesUnboundContainer(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "nri-refuse")
	h := startHook(t, ns, true)
	job := cluster.Job("refuse", 1, 1)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why, err := env.WaitAgentEvent(ctx, ns, "Pod", "", "CXIBindRefused")
	if err != nil {
		t.Fatalf("%v\nhook: %+v\n%s", err, h.Calls(), env.Describe(ctx))
	}
	t.Logf("event CXIBindRefused: %s", why)
	// The plugin's error as containerd returned it to the kubelet: the
	// agent's own event has no "slingshot: " prefix.
	kubelet, err := env.WaitPodWarning(ctx, ns, "", func(msg string) bool {
		return strings.Contains(msg, "slingshot: ") && strings.Contains(msg, "not bound")
	})
	if err != nil {
		t.Errorf("the kubelet reports no failed creation naming the refusal: %v", err)
	}
	t.Logf("the kubelet's event: %s", kubelet)
	pods, err := env.WaitRunning(ctx, ns, "e2e-job=refuse", 1)
	if err != nil {
		t.Fatalf("the pod never ran once PreStartContainer could bind it again: %v\nhook: %+v", err, h.Calls())
	}

	calls := h.Calls()
	for _, c := range calls {
		t.Logf("hook: %s %s netns %d admitting %+v destroyed %v err %v", c.Op, c.Pod, c.Netns, c.Admitting, c.Destroyed, c.Err)
	}
	if len(calls) == 0 || calls[0].Op != "create" {
		t.Fatalf("the hook's first call %+v, want the pod's CreateContainer", calls)
	}
	first := calls[0]
	if first.Err != nil || len(first.Admitting) != 1 || len(first.Destroyed) != 1 {
		t.Fatalf("at the first CreateContainer the hook found %+v and destroyed %v (%v); want the pod's one service, destroyed", first.Admitting, first.Destroyed, first.Err)
	}
	if s := first.Admitting[0]; !s.Enabled || !s.OnlyNetns(first.Netns) {
		t.Errorf("at the first CreateContainer, service %s/%d enabled=%v netns=%v: PreStartContainer had not bound it to the sandbox's namespace %d", s.NIC, s.ID, s.Enabled, s.NetNS, first.Netns)
	}
	gone := first.Admitting[0]
	if !strings.Contains(why, "refused at its creation") || !strings.Contains(why, fmt.Sprintf("service %d on %s", gone.ID, gone.NIC)) {
		t.Errorf("event %q: want the refusal at creation, naming service %d on %s", why, gone.ID, gone.NIC)
	}

	made := slices.IndexFunc(calls, func(c hookCall) bool { return c.Op != "create" })
	if made < 2 {
		t.Fatalf("the runtime made the container after %d CreateContainer(s) (%+v): want it refused at the first and let through at a later one", made, calls)
	}
	if ops := opsOf(calls[made:]); !slices.Equal(ops, []string{"postcreate", "start"}) {
		t.Errorf("after the container was let through, the runtime called %v, want a post-create and a start", ops)
	}
	last := calls[made-1]
	if last.Err != nil || len(last.Admitting) != 1 || last.Netns != first.Netns {
		t.Fatalf("at the CreateContainer let through, the hook found %+v in namespace %d (%v): want one service, in the sandbox's namespace %d", last.Admitting, last.Netns, last.Err, first.Netns)
	}
	if s := last.Admitting[0]; !s.Enabled || !s.OnlyNetns(first.Netns) || !slices.Equal(s.VNIs, gone.VNIs) {
		t.Errorf("before the CreateContainer let through, service %s/%d enabled=%v netns=%v vnis=%v: want it bound again by PreStartContainer to %d with VNIs %v", s.NIC, s.ID, s.Enabled, s.NetNS, s.VNIs, first.Netns, gone.VNIs)
	}

	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := viewPod(t, pods[0], rep)
	checkNRIBound(t, ctx, pods[0], v, 1)
	if v.Netns != first.Netns {
		t.Errorf("the pod runs in namespace %d, not its sandbox's %d", v.Netns, first.Netns)
	}
	if cs := pods[0].Status.ContainerStatuses[0]; cs.RestartCount != 0 {
		t.Errorf("container restarted %d times: it should have run once, after the refusal", cs.RestartCount)
	}
}

func opsOf(calls []hookCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Op)
	}
	return out
}

// TestNRIRestartedContainerRebound: a running pod's service destroyed
// behind the agent's back, then its container killed. The kubelet's
// PreStartContainer for the restart makes and binds a service again
// before the runtime's CreateContainer, so the agent lets the one
// CreateContainer of the restart through (the hook, recording only, sees
// one create, then the container made and started) and the restarted
// container, in the same sandbox, runs bound, its environment naming the
// service it has now. This is why TestNRIRefusesUnboundContainer needs
// the hook to meet a refusal.
func TestNRIRestartedContainerRebound(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "nri-restart")
	h := startHook(t, ns, false)
	pod := cluster.AlwaysRestarting(cluster.Job("restart", 1, 1))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	p, err := env.RunPod(ctx, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := viewPod(t, p, rep)
	checkNRIBound(t, ctx, p, before, 1)
	if t.Failed() {
		t.FailNow()
	}
	gone := before.Admitting[0]
	if err := env.DestroyService(gone.NIC, gone.ID); err != nil {
		t.Fatal(err)
	}
	if admitting, err := env.ServicesAdmitting(before.Netns); err != nil || len(admitting) > 0 {
		t.Fatalf("after the destroy, services %v admit the pod's namespace (%v)", admitting, err)
	}
	started := len(h.Calls())
	if err := syscall.Kill(before.App.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var cur corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := env.Node.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cur = *got
		return cluster.Started(&cur) && cur.Status.ContainerStatuses[0].RestartCount > 0, nil
	})
	if err != nil {
		t.Fatalf("the killed container never ran again: %v\n%s", err, env.Describe(ctx))
	}

	calls := h.Calls()[started:]
	for _, c := range calls {
		t.Logf("hook: %s %s netns %d admitting %+v", c.Op, c.Pod, c.Netns, c.Admitting)
	}
	if ops := opsOf(calls); !slices.Equal(ops, []string{"create", "postcreate", "start"}) {
		t.Fatalf("the restart's calls %v, want one create let through, then the container made and started", ops)
	}
	if c := calls[0]; c.Err != nil || c.Netns != before.Netns || len(c.Admitting) != 1 || !c.Admitting[0].Enabled || !c.Admitting[0].OnlyNetns(before.Netns) {
		t.Errorf("at the restart's CreateContainer the hook found %+v in namespace %d (%v): want the service made and bound again, to %d", c.Admitting, c.Netns, c.Err, before.Netns)
	}
	if rep, err = env.Inspect(ctx); err != nil {
		t.Fatal(err)
	}
	after := viewPod(t, cur, rep)
	checkNRIBound(t, ctx, cur, after, 1)
	if after.Netns != before.Netns || after.App.Pid == before.App.Pid {
		t.Errorf("after the restart: namespace %d, workload pid %d; before: %d, %d", after.Netns, after.App.Pid, before.Netns, before.App.Pid)
	}
}

package e2enri

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestNRIDisabledInRuntime: containerd restarted with NRI disabled, as an
// admin turning it off leaves it, would create containers that nothing
// checks. The agent says it is not ready, its /readyz naming NRI, and an
// event on the node says it lost the connection; a pod asking for a NIC
// is refused at PreStartContainer (the agent's CXIBindRefused event on it
// names NRI), so its container never starts and no service admits its
// sandbox's namespace; a pod running from before keeps its services.
// Once containerd runs with NRI again, the agent connects (an event on
// the node says so) and is ready, and the refused pod runs, bound.
func TestNRIDisabledInRuntime(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "nri-off")
	kept, err := env.RunJob(ctx, ns, cluster.Job("kept", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := viewPod(t, kept[0], rep)
	checkNRIBound(t, ctx, kept[0], before, 1)
	if t.Failed() {
		t.FailNow()
	}

	nriOn := false
	t.Cleanup(func() {
		if !nriOn {
			// Leave the node as the other tests expect it.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := restartContainerd(ctx, true); err != nil {
				t.Errorf("containerd with NRI again: %v", err)
			}
		}
	})
	if err := restartContainerd(ctx, false); err != nil {
		t.Fatal(err)
	}
	body, err := env.WaitReadyz(ctx, false, "NRI")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd runs without NRI; the agent's /readyz: %s", body)
	lost, err := env.WaitAgentEvent(ctx, metav1.NamespaceDefault, "Node", env.Node.Name, "CXINRIDisconnected")
	if err != nil {
		t.Error(err)
	}
	t.Logf("event CXINRIDisconnected: %s", lost)

	job := cluster.Job("refused", 1, 1)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why, err := env.WaitAgentEvent(ctx, ns, "Pod", "", "CXIBindRefused")
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	t.Logf("event CXIBindRefused: %s", why)
	if !strings.Contains(why, "NRI") {
		t.Errorf("event %q: want NRI named", why)
	}
	list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "e2e-job=refused"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the refused Job's pods: %v, %v", list, err)
	}
	refused := list.Items[0]
	if cluster.Started(&refused) {
		t.Fatalf("pod %s's container started while nothing could check it: %+v", refused.Name, refused.Status.ContainerStatuses)
	}
	netns, err := cluster.SandboxNetns(ctx, string(refused.UID))
	if err != nil {
		t.Fatal(err)
	}
	if admitting, err := env.ServicesAdmitting(netns); err != nil || len(admitting) > 0 {
		t.Errorf("services %v admit the refused pod's namespace %d (%v)", admitting, netns, err)
	}
	checkKept(t, ctx, kept[0], before)

	if err := restartContainerd(ctx, true); err != nil {
		t.Fatal(err)
	}
	nriOn = true
	if body, err = env.WaitReadyz(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd runs with NRI again; the agent's /readyz: %s", body)
	back, err := env.WaitAgentEvent(ctx, metav1.NamespaceDefault, "Node", env.Node.Name, "CXINRIConnected")
	if err != nil {
		t.Error(err)
	}
	t.Logf("event CXINRIConnected: %s", back)
	running, err := env.WaitRunning(ctx, ns, "e2e-job=refused", 1)
	if err != nil {
		t.Fatalf("the refused pod never ran once NRI was back: %v", err)
	}
	if rep, err = env.Inspect(ctx); err != nil {
		t.Fatal(err)
	}
	checkNRIBound(t, ctx, running[0], viewPod(t, running[0], rep), 1)
	checkKept(t, ctx, kept[0], before)
}

// restartContainerd restarts the node's containerd with NRI on or off
// and waits until the node is Ready.
func restartContainerd(ctx context.Context, nri bool) error {
	if err := env.Node.RestartContainerd(ctx, nri); err != nil {
		return err
	}
	return env.Node.WaitNodeReady(ctx)
}

// checkKept checks that pod, seen as before, still runs in the same
// namespace, with the same services bound as they were.
func checkKept(t *testing.T, ctx context.Context, pod corev1.Pod, before podView) {
	t.Helper()
	p, err := env.Node.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || !cluster.Started(p) {
		t.Fatalf("pod %s no longer runs: %v", before.Key, err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := viewPod(t, *p, rep)
	cluster.CheckBound(t, now.PodView, 1)
	cluster.CheckReported(t, now.PodView, now.Services, 1)
	if now.Netns != before.Netns || now.Env["SLINGSHOT_SVC_IDS"] != before.Env["SLINGSHOT_SVC_IDS"] || len(now.Admitting) != 1 || now.Admitting[0].ID != before.Admitting[0].ID {
		t.Errorf("pod %s: namespace %d, services %+v (env %q); before: %d, %+v (%q)", before.Key, now.Netns, now.Admitting, now.Env["SLINGSHOT_SVC_IDS"], before.Netns, before.Admitting, before.Env["SLINGSHOT_SVC_IDS"])
	}
}

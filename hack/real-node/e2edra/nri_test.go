package e2edra

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRANRIUnreachableFailsClosed (issue 24, defect 2): the agent
// restarted while the runtime's NRI socket cannot be reached is not
// ready, and refuses to prepare claims, so a claimed pod's container does
// not start (an event names NRI) rather than run on services nothing
// could bind. Once the socket is back, the agent connects, is ready, and
// the pod starts with its services bound.
func TestDRANRIUnreachableFailsClosed(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	sock := env.Node.NRISocket
	away := sock + ".away"
	// containerd keeps listening on the socket's inode; only its name goes.
	if err := os.Rename(sock, away); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.Rename(away, sock); err != nil {
				t.Errorf("put the NRI socket back: %v", err)
			}
		}
	}
	t.Cleanup(restore)

	oldUID, err := env.DeleteAgentPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := env.Node.Client.CoreV1().Pods(cluster.Namespace)
	sel := metav1.ListOptions{LabelSelector: cluster.AgentSelector}
	// The new agent runs, registered with the kubelet, but is not ready.
	var agent corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.List(ctx, sel)
		if err != nil || len(list.Items) != 1 || list.Items[0].UID == oldUID {
			return false, nil
		}
		agent = list.Items[0]
		for _, cs := range agent.Status.ContainerStatuses {
			if cs.Name == "agent" && cs.State.Running != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the new agent never ran: %v\n%s", err, env.Describe(ctx))
	}

	ns := env.TestNamespace(t, "dra-nri")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("nri", 1, "nic")
	env.WithServiceCheck(&job.Spec.Template.Spec)
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodWarning(t, ctx, ns, "", "names NRI", func(msg string) bool { return strings.Contains(msg, "NRI") })
	if ready := podReady(t, ctx, c, sel); ready {
		t.Fatal("the agent reports ready without an NRI connection")
	}
	list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if cluster.Started(&p) {
			t.Fatalf("pod %s's container started while nothing could bind its services", p.Name)
		}
	}

	restore()
	pods, err := env.WaitRunning(ctx, ns, "e2e-job=nri", 1)
	if err != nil {
		t.Fatalf("after the NRI socket came back: %v\n%s", err, env.Describe(ctx))
	}
	checkBound(t, viewDRAPod(t, ctx, pods[0]))
	if err := env.WaitReplaced(ctx, cluster.Namespace, sel.LabelSelector, oldUID); err != nil {
		t.Fatal(err)
	}
}

// podReady reports whether the one pod sel selects is Ready.
func podReady(t *testing.T, ctx context.Context, c interface {
	List(context.Context, metav1.ListOptions) (*corev1.PodList, error)
}, sel metav1.ListOptions) bool {
	t.Helper()
	list, err := c.List(ctx, sel)
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("agent pods: %v, %v", list, err)
	}
	for _, cond := range list.Items[0].Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

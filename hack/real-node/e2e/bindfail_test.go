package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// TestBindFailingOnSecondNIC (issue 24): a pod of two NICs whose service
// on the second NIC cannot be made (the driver refuses SVC_ALLOC with
// ENOSPC, injected into the simulated cxi1) does not start, an event on
// it names the NIC and the driver's error, and no service on either NIC
// admits its network namespace: the one made on cxi0 first is destroyed
// again. Once the NIC takes services again the kubelet's retry starts the
// pod, isolated as usual.
func TestBindFailingOnSecondNIC(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "bindfail")
	clear, err := env.InjectFault("cxi1", sim.Fault{Op: uapi.OpSvcAlloc, Errno: syscall.ENOSPC, Count: -1})
	if err != nil {
		t.Fatal(err)
	}
	cleared := false
	t.Cleanup(func() {
		if !cleared {
			_ = clear()
		}
	})
	job := cluster.Job("bindfail", 1, 2)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's own event on the pod names the NIC and the driver's
	// error, and says what to do.
	why := waitEvent(t, ctx, ns, "Pod", "", "CXIBindRefused")
	if !strings.Contains(why, "cxi1") || !strings.Contains(why, syscall.ENOSPC.Error()) || !strings.Contains(why, "What to do") {
		t.Errorf("event %q: want cxi1, %q and what to do", why, syscall.ENOSPC.Error())
	}

	pods, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the job: %v (err %v), want 1", pods, err)
	}
	pod := pods.Items[0]
	if cluster.Started(&pod) {
		t.Fatalf("the container started although a service is missing: %+v", pod.Status.ContainerStatuses)
	}
	inode := sandboxNetns(t, ctx, string(pod.UID))
	// The kubelet retries the container meanwhile, and each try makes
	// cxi0's service again before cxi1 refuses: between tries none may
	// remain. A service left behind admits the namespace for good.
	var admitting []string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		admitting = admittingNetns(t, inode)
		return len(admitting) == 0, nil
	})
	if err != nil {
		t.Fatalf("services still admit the failed pod's namespace %d: %v\n%s", inode, admitting, env.Describe(ctx))
	}

	cleared = true
	if err := clear(); err != nil {
		t.Fatal(err)
	}
	running, err := env.WaitRunning(ctx, ns, "job-name=bindfail", 1)
	if err != nil {
		t.Fatalf("the pod did not start once cxi1 took services again: %v\n%s", err, env.Describe(ctx))
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkIsolated(t, viewPod(t, running[0], rep), 2)
}

// sandboxNetns is the network namespace inode of the pod's sandbox, as
// the host sees it in /proc/<pid>/ns/net of its processes.
func sandboxNetns(t *testing.T, ctx context.Context, uid string) uint32 {
	t.Helper()
	var inode uint32
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		procs, err := cluster.PodProcesses(uid)
		if err != nil {
			return false, err
		}
		for _, p := range procs {
			if ino, err := netns.ParseNetnsLink(p.Netns); err == nil {
				inode = ino
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: no sandbox process: %v", uid, err)
	}
	return inode
}

// admittingNetns lists the services of the node's simulated NICs, as the
// driver holds them, that admit the namespace inode: "cxi0/5".
func admittingNetns(t *testing.T, inode uint32) []string {
	t.Helper()
	var out []string
	for _, nic := range []string{"cxi0", "cxi1"} {
		svcs, err := simstate.Read(env.SimStateDir, nic)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs {
			if slices.Contains(s.NetNS, inode) {
				out = append(out, fmt.Sprintf("%s/%d", s.NIC, s.ID))
			}
		}
	}
	return out
}

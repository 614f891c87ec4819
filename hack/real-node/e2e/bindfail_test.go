package e2e

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestBindFailingOnSecondNIC (issue 24): a pod of two NICs whose service
// on the second NIC cannot be made (the driver refuses SVC_ALLOC with
// ENOSPC, injected into the simulated cxi1) does not start, an event on
// it names the NIC and the driver's error, and no service on either NIC
// admits its network namespace: the one made on cxi0 first is destroyed
// again. Once the NIC takes services again the kubelet's retry starts the
// pod, isolated as usual.
func TestBindFailingOnSecondNIC(t *testing.T) {
	env.BindFailOnSecondNIC(t, env.TestNamespace(t, "bindfail"), cluster.BindFailure{
		// The device plugin makes each service at PreStart.
		Op: uapi.OpSvcAlloc,
		Job: func(*testing.T, string) *batchv1.Job {
			return cluster.Job(cluster.BindFailJob, 1, 2)
		},
		// The kubelet retries the container, and each try makes cxi0's
		// service again before cxi1 refuses: between tries none may
		// remain. A service left behind admits the namespace for good.
		Unbound: func(t *testing.T, ctx context.Context, _ string, pod corev1.Pod) (string, func(context.Context) (string, bool)) {
			t.Helper()
			inode, err := cluster.SandboxNetns(ctx, string(pod.UID))
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("services still admit the failed pod's namespace %d", inode), func(context.Context) (string, bool) {
				admitting, err := env.ServicesAdmitting(inode)
				if err != nil {
					return err.Error(), false
				}
				return fmt.Sprint(admitting), len(admitting) == 0
			}
		},
		CheckRunning: func(t *testing.T, ctx context.Context, pod corev1.Pod) {
			t.Helper()
			rep, err := env.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkIsolated(t, viewPod(t, pod, rep), 2)
		},
	})
}

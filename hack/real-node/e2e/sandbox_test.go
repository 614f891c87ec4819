package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestAgentKilledSandboxesMadeAgain (issue 32): the agent SIGKILLed and
// kept down, every pod's sandbox made again meanwhile (new network
// namespaces), the agent started; then once more with the driver's
// services wiped while it is down (cluster.AgentDownSandboxesRemade). A
// service never admits another pod's current namespace, and the pods run
// again bound to their new ones. Three pods, each with a VNI of its own:
// one holds both NICs, two hold one each, so that every NIC serves two
// pods or more.
func TestAgentKilledSandboxesMadeAgain(t *testing.T) {
	env.AgentDownSandboxesRemade(t, env.TestNamespace(t, "remade"), cluster.SandboxRemake{
		Pods: func(t *testing.T, _ string) []*corev1.Pod {
			// Shares of both NICs free: earlier tests' pods may still hold
			// one NIC's, and a pod of two would get two shares of the other.
			if err := env.WaitNICsFree(t.Context()); err != nil {
				t.Fatal(err)
			}
			return []*corev1.Pod{
				cluster.AlwaysRestarting(cluster.Job("two", 1, 2)),
				cluster.AlwaysRestarting(cluster.Job("one-a", 1, 1)),
				cluster.AlwaysRestarting(cluster.Job("one-b", 1, 1)),
			}
		},
		CheckRunning: func(t *testing.T, ctx context.Context, pod corev1.Pod) {
			t.Helper()
			rep, err := env.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			limit := pod.Spec.Containers[0].Resources.Limits[cluster.Resource]
			checkIsolated(t, viewPod(t, pod, rep), int(limit.Value()))
		},
	})
}

package e2edra

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRAAgentKilledSandboxesMadeAgain (issue 32): the agent SIGKILLed
// and kept down, every pod's sandbox made again meanwhile (new network
// namespaces), the agent started; then once more with the driver's
// services wiped while it is down (cluster.AgentDownSandboxesRemade). A
// service never admits another pod's current namespace, and the pods run
// again bound to their new ones. Three pods on the node's four NICs, each
// with a VNI of its own: one claims two NICs, two claim one each (a NIC
// is one claim's at a time).
//
// While the agent is down its NRI plugin is not there to refuse a
// container, so the pods' containers start again in their new sandboxes
// before anything can bind them: the services then still admit the old
// namespaces, which admits no one. The agent binds the claims when it
// connects again (Synchronize). So after each round a pod is checked for
// running bound (checkRunsBound), not for having started bound.
func TestDRAAgentKilledSandboxesMadeAgain(t *testing.T) {
	needDRA(t)
	env.AgentDownSandboxesRemade(t, env.TestNamespace(t, "dra-remade"), cluster.SandboxRemake{
		Pods: func(t *testing.T, ns string) []*corev1.Pod {
			for name, nics := range map[string]int{"one": 1, "two": 2} {
				if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), cluster.NICClaimTemplate(name, nics, "pod"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var pods []*corev1.Pod
			for name, template := range map[string]string{"two": "two", "one-a": "one", "one-b": "one"} {
				p := cluster.AlwaysRestarting(cluster.ClaimJob(name, 1, template))
				env.WithServiceCheck(&p.Spec)
				pods = append(pods, p)
			}
			return pods
		},
		CheckRunning: func(t *testing.T, ctx context.Context, pod corev1.Pod) {
			t.Helper()
			checkRunsBound(t, viewDRAPod(t, ctx, pod))
		},
	})
}

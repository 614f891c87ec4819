package e2e

import (
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTwoNodesShareJobVNI runs two agents (two processes, two kubelets)
// against one controller: two pods of one job on different nodes share a
// VNI; a pod of another job never does.
func TestTwoNodesShareJobVNI(t *testing.T) {
	ctx := t.Context()
	job1 := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "solver", UID: "11111111-0000-4000-8000-000000000001", Controller: harness.Ptr(true)}
	job2 := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "other", UID: "22222222-0000-4000-8000-000000000002", Controller: harness.Ptr(true)}
	a1 := newPod("hpc", "solver-a", 1, job1)
	b1 := newPod("hpc", "solver-b", 1, job1)
	a2 := newPod("hpc", "other-a", 1, job2)

	pki := harness.NewPKI(t)
	addr := harness.StartController(t, ctx, pki, []*v1.Pod{a1, b1, a2}, []*metav1.OwnerReference{job1, job2})

	nodes := map[string]*harness.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		n := newNode(t, name, 2, 1)
		n.StartKubelet(ctx)
		cert, key := pki.Issue(t, "slingshot-agent:"+name)
		n.StartAgent("--controller", addr, "--controller-ca-file", pki.CAFile, "--controller-cert-file", cert, "--controller-key-file", key)
		eventually(t, 10*time.Second, name+" registered", func() (bool, string) {
			c, _ := n.Kubelet.Capacity(nicResource)
			return c == 2, itoa(c)
		})
		nodes[name] = n
	}

	vniOf := func(n *harness.Node, p *v1.Pod) uint16 {
		t.Helper()
		netns := n.StartSandbox(p)
		if _, err := n.Kubelet.Admit(ctx, p); err != nil {
			t.Fatalf("admit %s on %s: %v", p.Name, n.Name, err)
		}
		for _, svcs := range n.AllServices() {
			for _, s := range svcs {
				if s.Members[0].ID == netns {
					return s.VNIs[0]
				}
			}
		}
		t.Fatalf("no service for %s on %s", p.Name, n.Name)
		return 0
	}
	va1 := vniOf(nodes["node-a"], a1)
	vb1 := vniOf(nodes["node-b"], b1)
	va2 := vniOf(nodes["node-a"], a2)
	t.Logf("job solver: VNI %d on node-a, %d on node-b; job other: VNI %d", va1, vb1, va2)
	if va1 != vb1 {
		t.Errorf("pods of one job got VNIs %d and %d", va1, vb1)
	}
	if va2 == va1 {
		t.Errorf("two jobs share VNI %d", va1)
	}
}

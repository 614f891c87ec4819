package e2emulti

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestMultiDRAClaimTemplate: with the agents' DRA front end, a Job whose
// pods, one on each node, each get a claim of one NIC from one template
// with vni: job. Each claim is allocated from its pod's node's
// ResourceSlice pool; the pods share one VNI, carried by a service on each
// node that the agent's NRI plugin bound to that node's pod alone, and in
// both containers' SLINGSHOT_VNIS; both nodes hold its lease; the Job has
// one reservation of hardware collectives, its variables in both
// containers (through the claims' CDI specs). A second Job from the same
// template gets another VNI.
func TestMultiDRAClaimTemplate(t *testing.T) {
	needAPI(t, cluster.APIDRA)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra")
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.NICClaimTemplate("nic", 1, "job"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vnis []uint16
	for _, job := range []string{"a", "b"} {
		made := fm.Created()
		pods := runSpread(t, ns, spread(cluster.ClaimJob(job, 2, "nic")))
		for name, p := range pods {
			claims, err := env.PodClaims(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			c := claims[cluster.ClaimName]
			if c == nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
				t.Fatalf("pod %s on %s: claim %v, want one allocated NIC", p.Name, name, c)
			}
			if r := c.Status.Allocation.Devices.Results[0]; r.Pool != name || r.Driver != cluster.DRADriver {
				t.Errorf("pod %s on %s: claim %s allocated %s/%s/%s, want from pool %s", p.Name, name, c.Name, r.Driver, r.Pool, r.Device, name)
			}
		}
		vnis = append(vnis, jobVNIAcross(t, pods))
		checkCollectives(t, ns, job, pods, made)
	}
	if vnis[0] == vnis[1] {
		t.Errorf("Jobs a and b share VNI %d", vnis[0])
	}
	t.Logf("job a: VNI %d, job b: VNI %d, each on %v through claims from one template", vnis[0], vnis[1], allNodeNames())
}

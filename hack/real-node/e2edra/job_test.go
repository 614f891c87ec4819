package e2edra

import (
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// TestDRAJobSharesVNI: a Job of two pods, each with a claim of one NIC
// from a template with vni: job. Both pods run; their services (one per
// pod and NIC) carry one VNI; each admits exactly its pod's network
// namespace, the inode the host sees in /proc/<pid>/ns/net, and is
// enabled, and was so when the container's program started (its svccheck
// lines); the containers have the SLINGSHOT_* environment and their
// /dev/cxiN. Deleting the Job (the garbage collector deletes the pods and
// their claims) destroys the services, removes the claims' CDI specs and
// releases the node's hold on the VNI. The node asks the controller once
// for both claims.
func TestDRAJobSharesVNI(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-job")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("a", 2, "nic")
	env.WithServiceCheck(&job.Spec.Template.Spec)
	acquires := func() float64 {
		n, err := env.AgentCounter(ctx, "slingshot_agent_controller_request_duration_seconds", map[string]string{"op": "acquire"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := acquires()
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	// The two claims share the node's lease of the Job: one controller
	// call (the pods' Job label, from the agent's watch of its pods).
	if calls := acquires() - before; calls != 1 {
		t.Errorf("%v controller acquire calls for a Job's two claims on one node, want 1", calls)
	}
	var (
		vni    uint16
		svcs   []simstate.Service
		specs  []string
		claims []*resourcev1.ResourceClaim
		nics   = map[string][]string{}
	)
	for i, p := range pods {
		v := viewDRAPod(t, ctx, p)
		checkBound(t, v)
		if i > 0 && v.JobVNI() != vni {
			t.Errorf("pods of one Job on VNIs %d and %d", vni, v.JobVNI())
		}
		vni = v.JobVNI()
		// The pods may share a NIC (consumable capacity): each has a
		// service of its own there all the same.
		for _, d := range v.Allocated {
			nics[d] = append(nics[d], v.Key)
		}
		svcs = append(svcs, v.Services...)
		for _, c := range v.Claims {
			cs := claimSpecs(t, c)
			if len(cs) == 0 {
				t.Errorf("pod %s: no CDI spec of claim %s (uid %s) in %s", v.Key, c.Name, c.UID, env.Node.CDIDir)
			}
			specs = append(specs, cs...)
		}
		claims = append(claims, v.Claims...)
		t.Logf("pod %s: netns %d, NICs %v, services %v, env %v", v.Key, v.Netns, v.Allocated, v.Services, v.Env)
	}
	if len(svcs) != 2 || svcs[0].NIC == svcs[1].NIC && svcs[0].ID == svcs[1].ID {
		t.Fatalf("%d services for the Job's two pods, want 2, one each: %+v", len(svcs), svcs)
	}
	t.Logf("NICs: %v", nics)
	if h := vniHolders(t, ctx, vni); len(h) != 1 || h[0] != env.Node.Name {
		t.Errorf("VNI %d held by %v at the controller, want [%s]", vni, h, env.Node.Name)
	}

	if err := env.DeleteJob(ctx, ns, "a"); err != nil {
		t.Fatal(err)
	}
	gone, err := env.WaitPodsGone(ctx, ns, "e2e-job=a")
	if err != nil {
		t.Fatal(err)
	}
	clean, err := waitDRACleanedUp(ctx, svcs, specs, claims, vni)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("job VNI %d; services destroyed, CDI specs removed, claims deleted and hold released %s after the pods were gone from the API",
		vni, max(0, clean.Sub(gone)).Round(time.Millisecond))
}

// TestDRAExtendedResource: a pod asking for hpe.com/cxi: 1 in its limits,
// as with the device plugin, gets a NIC through DRA: the chart's NIC
// DeviceClass carries the extended resource name (dra.extendedResource),
// the scheduler makes the pod a claim of that class, and the agent binds
// its service like a template claim's (the default vni: job). Deleting
// the Job cleans it up.
func TestDRAExtendedResource(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-ext")
	job := cluster.Job("ext", 1, 1)
	env.WithServiceCheck(&job.Spec.Template.Spec)
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, pods[0])
	if len(v.Claims) != 1 {
		t.Fatalf("pod %s: claims %v, want the one made for its extended resource", v.Key, v.Claims)
	}
	checkBound(t, v)
	t.Logf("pod %s: claim %s, NICs %v, VNI %d, services %v", v.Key, v.Claims[0].Name, v.Allocated, v.JobVNI(), v.Services)
	var specs []string
	for _, c := range v.Claims {
		specs = append(specs, claimSpecs(t, c)...)
	}
	if err := env.DeleteJob(ctx, ns, "ext"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=ext"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitDRACleanedUp(ctx, v.Services, specs, v.Claims, v.JobVNI()); err != nil {
		t.Fatal(err)
	}
}

package e2edra

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// hpcNamespace is the namespace the node's jobOptions grant BULK_DATA
// and the storage VNI (cluster.JobOptions, TestMain's values): a fixed
// name, since the policy names namespaces.
const hpcNamespace = "dra-hpc"

// claimOptions is the serviceOptions of TestDRAServiceOptions' claims.
const claimOptions = `{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":4,"vnis":["storage"]}`

// TestDRAServiceOptions: a Job's claims whose opaque configuration asks
// for LOW_LATENCY and BULK_DATA, depth 4 and the storage VNI, in the
// namespace the node's policy grants them, get services with those
// classes, 4 times Slurm's per-rank reservation and the job VNI then the
// storage VNI, in the driver's state and as the agent reports them, and
// SLINGSHOT_TCS and SLINGSHOT_VNIS to match in the container. The same
// claim in another namespace is refused at prepare, holding nothing, with
// a warning on the pod naming the field and the policy.
func TestDRAServiceOptions(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.UseNamespace(t, hpcNamespace)
	createOptionsTemplate(t, ns)
	job := cluster.ClaimJob("opts", 1, "nic")
	env.WithServiceCheck(&job.Spec.Template.Spec)
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	v := viewDRAPod(t, ctx, pods[0])
	checkBound(t, v)
	wantVNIs := []uint16{v.JobVNI(), cluster.StorageVNI}
	if !slices.Equal(v.VNIs, wantVNIs) {
		t.Errorf("pod %s: SLINGSHOT_VNIS=%q, want the job VNI, then the storage VNI %d", v.Key, v.Env["SLINGSHOT_VNIS"], cluster.StorageVNI)
	}
	if v.Env["SLINGSHOT_TCS"] != "0x6" {
		t.Errorf("pod %s: SLINGSHOT_TCS=%q, want 0x6 (LOW_LATENCY|BULK_DATA)", v.Key, v.Env["SLINGSHOT_TCS"])
	}
	// Slurm's per-rank defaults (TXQs 2, LEs 16, PTEs 6) times depth 4.
	wantRes := map[string]int{"TXQs": 8, "LEs": 64, "PTEs": 24}
	if len(v.Services) == 0 {
		t.Fatalf("pod %s: no service found for SLINGSHOT_DEVICES %v, SLINGSHOT_SVC_IDS %v", v.Key, v.Devices, v.SvcIDs)
	}
	for _, s := range v.Services {
		key := svcKey(s.NIC, s.ID)
		// The driver's own state.
		if !slices.Equal(s.VNIs, wantVNIs) || s.TCs != "0x6" {
			t.Errorf("pod %s: the driver has service %s with VNIs %v and classes %q, want %v and 0x6", v.Key, key, s.VNIs, s.TCs, wantVNIs)
		}
		// The agent's report of it.
		r := v.ReportedSvc[key]
		if !slices.Equal(r.VNIs, wantVNIs) || r.TCs != "0x6" {
			t.Errorf("pod %s: the agent reports service %s with VNIs %v and classes %q, want %v and 0x6", v.Key, key, r.VNIs, r.TCs, wantVNIs)
		}
		for res, n := range wantRes {
			if s.Reserved[res] != n || r.Reserved[res] != n {
				t.Errorf("pod %s: service %s reserves %d %s in the driver, %d as reported; want %d (4 ranks)", v.Key, key, s.Reserved[res], res, r.Reserved[res], n)
			}
		}
	}

	other := env.TestNamespace(t, "dra-opts-denied")
	createOptionsTemplate(t, other)
	job = cluster.ClaimJob("opts", 1, "nic")
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(other).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why := waitPodWarning(t, ctx, other, "", "refusing the claim's serviceOptions", func(msg string) bool {
		return strings.Contains(msg, "serviceOptions")
	})
	checkRefusedClaim(t, other, why, "BULK_DATA is not allowed", "trafficClasses[1]", "jobOptions.trafficClasses")
}

// createOptionsTemplate makes the ResourceClaimTemplate "nic" of one NIC
// with vni "job" and claimOptions in ns. The options reserve LEs, so each
// claim's service takes an LE pool of its NIC, which the request counts
// (lePools) on a NIC claims share.
func createOptionsTemplate(t *testing.T, ns string) {
	t.Helper()
	tmpl := cluster.NICClaimTemplateWith("nic", 1, &cluster.ClaimConfig{VNI: "job", ServiceOptions: json.RawMessage(claimOptions)})
	req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"lePools": resource.MustParse("1")}}
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDRAClaimReservingLEsCountsAPool: a claim whose serviceOptions
// reserve LEs on a NIC claims share, and whose request counts none of the
// NIC's LE pools, is refused at Prepare with a warning on its pod that
// names the capacity to ask for (lePools), holding nothing.
func TestDRAClaimReservingLEsCountsAPool(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-lepools")
	tmpl := cluster.NICClaimTemplateWith("nic", 1, &cluster.ClaimConfig{VNI: "job", ServiceOptions: json.RawMessage(`{"depth":4}`)})
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := cluster.ClaimJob("lepools", 1, "nic")
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why := waitPodWarning(t, ctx, ns, "", "refusing a claim that counts no LE pool", func(msg string) bool {
		return strings.Contains(msg, "lePools")
	})
	checkRefusedClaim(t, ns, why, "reserve LEs", "capacity: {requests: {lePools")
}

// checkRefusedClaim checks that the refusal why says each of wants, and
// that the refused claims of namespace ns hold nothing: none is in the
// agent's report.
func checkRefusedClaim(t *testing.T, ns, why string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(why, want) {
			t.Errorf("the refusal %q does not say %q", why, want)
		}
	}
	rep, err := env.Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Claims {
		if c.Namespace == ns {
			t.Errorf("the refused claim %s/%s is in the agent's report: %+v", c.Namespace, c.Name, c)
		}
	}
}

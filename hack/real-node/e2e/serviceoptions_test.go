package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// hpcNamespace is the namespace the node's jobOptions grant BULK_DATA
// and the storage VNI (cluster.JobOptions, TestMain's values): a fixed
// name, since the policy names namespaces.
const hpcNamespace = "e2e-hpc"

// withOptions is job with the service-options annotation on its pods.
func withOptions(job *batchv1.Job, options string) {
	if job.Spec.Template.Annotations == nil {
		job.Spec.Template.Annotations = map[string]string{}
	}
	job.Spec.Template.Annotations[jobreq.Annotation] = options
}

// runWithOptions runs a Job of one pod holding nics NICs, with the
// service options, in hpcNamespace, and returns the pod's view, checked
// isolated.
func runWithOptions(t *testing.T, name string, nics int, options string) podView {
	t.Helper()
	ctx := t.Context()
	if err := env.WaitNICsFree(ctx); err != nil {
		t.Fatal(err)
	}
	ns := env.UseNamespace(t, hpcNamespace)
	job := cluster.Job(name, 1, nics)
	withOptions(job, options)
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := viewPod(t, pods[0], rep)
	checkIsolated(t, v, nics)
	return v
}

// refusedElsewhere runs the same Job in a namespace the policy grants
// nothing, and checks that the agent's event refusing its pod at PreStart
// says each of wants (the field and the policy).
func refusedElsewhere(t *testing.T, name, options string, wants ...string) {
	t.Helper()
	ctx := t.Context()
	ns := env.TestNamespace(t, name+"-denied")
	job := cluster.Job(name, 1, 1)
	withOptions(job, options)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why := waitEvent(t, ctx, ns, "Pod", "", "CXIBindRefused")
	for _, want := range wants {
		if !strings.Contains(why, want) {
			t.Errorf("the refusal %q does not say %q", why, want)
		}
	}
}

// driverService is the service as the simulated driver holds it, not as
// the agent reports it.
func driverService(t *testing.T, v podView, s inspect.Service) simstate.Service {
	t.Helper()
	d, ok, err := simstate.Find(env.SimStateDir, s.NIC, s.ID)
	if err != nil || !ok {
		t.Fatalf("pod %s: service %s/%d in the driver: found %v, %v", v.Key, s.NIC, s.ID, ok, err)
	}
	return d
}

// TestServiceOptions: a Job asking for LOW_LATENCY and BULK_DATA, depth 8,
// in the namespace granted BULK_DATA gets services with those classes,
// SLINGSHOT_TCS to match and 8 times Slurm's per-rank reservation; the
// same Job in another namespace is refused at PreStart with an event
// naming the field.
func TestServiceOptions(t *testing.T) {
	const options = `{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":8}`
	v := runWithOptions(t, "opts", 1, options)
	if v.Env["SLINGSHOT_TCS"] != "0x6" {
		t.Errorf("pod %s: SLINGSHOT_TCS=%q in its environment, want 0x6 (LOW_LATENCY|BULK_DATA)", v.Key, v.Env["SLINGSHOT_TCS"])
	}
	// Slurm's per-rank defaults (TXQs 2, LEs 16, PTEs 6) times depth 8.
	want := map[string]int{"TXQs": 16, "LEs": 128, "PTEs": 48}
	for _, s := range v.Services {
		if s.TCs != "0x6" {
			t.Errorf("pod %s: service %s/%d classes %s, want 0x6", v.Key, s.NIC, s.ID, s.TCs)
		}
		d := driverService(t, v, s)
		if d.TCs != "0x6" {
			t.Errorf("pod %s: the driver has service %s/%d with classes %s, want 0x6", v.Key, s.NIC, s.ID, d.TCs)
		}
		for res, n := range want {
			if s.Reserved[res] != n || d.Reserved[res] != n {
				t.Errorf("pod %s: service %s/%d reserves %d %s as reported, %d in the driver; want %d (8 ranks)", v.Key, s.NIC, s.ID, s.Reserved[res], res, d.Reserved[res], n)
			}
		}
	}

	refusedElsewhere(t, "opts", options, "BULK_DATA is not allowed", "trafficClasses[1]", "jobOptions.trafficClasses")
}

// TestStorageVNI: a pod of the namespace allowed to join the storage VNI
// that asks for it has services carrying its job VNI and then the storage
// VNI, in the driver's state and as the agent reports them, and
// SLINGSHOT_VNIS to match in its environment and env file; the same Job in
// another namespace is refused at PreStart with an event naming the
// policy.
func TestStorageVNI(t *testing.T) {
	const options = `{"vnis":["storage"]}`
	v := runWithOptions(t, "storage", 2, options)
	want := []uint16{v.JobVNI(), cluster.StorageVNI}
	if wantEnv := fmt.Sprintf("%d,%d", v.JobVNI(), cluster.StorageVNI); v.Env["SLINGSHOT_VNIS"] != wantEnv {
		t.Errorf("pod %s: SLINGSHOT_VNIS=%q, want %q (the job VNI, then the storage VNI)", v.Key, v.Env["SLINGSHOT_VNIS"], wantEnv)
	}
	for _, s := range v.Services {
		if !slices.Equal(s.VNIs, want) {
			t.Errorf("pod %s: the agent reports service %s/%d with VNIs %v, want %v", v.Key, s.NIC, s.ID, s.VNIs, want)
		}
		if got := driverService(t, v, s); !slices.Equal(got.VNIs, want) || !got.OnlyNetns(v.Netns) {
			t.Errorf("pod %s: the driver has service %s/%d with VNIs %v and netns %v, want VNIs %v and netns [%d]",
				v.Key, s.NIC, s.ID, got.VNIs, got.NetNS, want, v.Netns)
		}
	}

	refusedElsewhere(t, "storage", options, "vnis[0]", `may not join VNI "storage"`, "jobOptions.extraVNIs")
}

// TestTLEPoolsFull: every NIC has 4 TLE pools and the default service
// holds one, so a NIC takes 3 TLE-reserving pods; one pod more than the
// node's NICs take is refused, an event naming the TLE pools, and no NIC
// ever has more than its 4 pools held.
func TestTLEPoolsFull(t *testing.T) {
	ctx := t.Context()
	if err := env.WaitNICsFree(ctx); err != nil {
		t.Fatal(err)
	}
	fit := 3 * env.PhysicalNICs()
	ns := env.TestNamespace(t, "tle")
	job := cluster.Job("tle", fit+1, 1)
	withOptions(job, `{"resources":{"TLEs":{"res":8}}}`)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why := waitEvent(t, ctx, ns, "Pod", "", "CXIBindRefused")
	if !strings.Contains(why, "no TLE pool left") || !strings.Contains(why, "4 of the NIC's 4 are held") || !strings.Contains(why, "cxi") {
		t.Errorf("the refusal %q does not name the NIC and its TLE pools", why)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Reservations {
		if r.Resource == "TLE pools" && r.Reserved > 4 {
			t.Errorf("%s holds %d TLE pools, more than its 4", r.NIC, r.Reserved)
		}
	}
	if n := tleServices(rep, ns); n > fit {
		t.Errorf("%d TLE-reserving services for the Job, more than the %d that fit", n, fit)
	}
}

// tleServices counts the services of ns's pods that reserve TLEs.
func tleServices(rep *inspect.Report, ns string) int {
	n := 0
	for _, s := range rep.Services {
		if strings.HasPrefix(s.Pod, ns+"/") && s.Reserved["TLEs"] > 0 {
			n++
		}
	}
	return n
}

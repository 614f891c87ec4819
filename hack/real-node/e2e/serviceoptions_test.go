package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// hpcNamespace is the namespace the node's jobOptions grant BULK_DATA
// (TestMain's values): a fixed name, since the policy names namespaces.
const hpcNamespace = "e2e-hpc"

// storageVNI is the named VNI hpcNamespace may join (TestStorageVNI):
// outside the controller's VNI range (the chart's 1024-65535) and not the
// default service's 1 or 10.
const storageVNI = 900

// jobOptionsValues is the agent configuration TestMain installs: BULK_DATA
// and the storage VNI for hpcNamespace alone, the other bounds the
// defaults.
func jobOptionsValues() map[string]any {
	return map[string]any{
		"trafficClasses": map[string]any{"namespaces": map[string]any{hpcNamespace: []any{"BULK_DATA"}}},
		"extraVNIs":      []any{map[string]any{"name": "storage", "vni": storageVNI, "namespaces": []any{hpcNamespace}}},
	}
}

// withOptions is job with the service-options annotation on its pods.
func withOptions(job *batchv1.Job, options string) {
	if job.Spec.Template.Annotations == nil {
		job.Spec.Template.Annotations = map[string]string{}
	}
	job.Spec.Template.Annotations[jobreq.Annotation] = options
}

// fixedNamespace makes the namespace name for one test and deletes it at
// the end, waiting for it to go so that the next test can make it again.
func fixedNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := env.NamedNamespace(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.DeleteNamespaceWait(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return name
}

// TestServiceOptions: a Job asking for LOW_LATENCY and BULK_DATA, depth 8,
// in the namespace granted BULK_DATA gets services with those classes,
// SLINGSHOT_TCS to match and 8 times Slurm's per-rank reservation; the
// same Job in another namespace is refused at PreStart with an event
// naming the field.
func TestServiceOptions(t *testing.T) {
	ctx := t.Context()
	if err := env.WaitNICsFree(ctx); err != nil {
		t.Fatal(err)
	}
	const options = `{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":8}`

	ns := fixedNamespace(t, hpcNamespace)
	job := cluster.Job("opts", 1, 1)
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
	checkIsolated(t, v, 1)
	procs, err := cluster.PodProcesses(v.UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.HasSuffix(p.Exe, "/workload") && p.Env["SLINGSHOT_TCS"] != "0x6" {
			t.Errorf("pod %s: SLINGSHOT_TCS=%q in its environment, want 0x6 (LOW_LATENCY|BULK_DATA)", v.Key, p.Env["SLINGSHOT_TCS"])
		}
	}
	// Slurm's per-rank defaults (TXQs 2, LEs 16, PTEs 6) times depth 8.
	want := map[string]int{"TXQs": 16, "LEs": 128, "PTEs": 48}
	for _, s := range v.Services {
		if s.TCs != "0x6" {
			t.Errorf("pod %s: service %s/%d classes %s, want 0x6", v.Key, s.NIC, s.ID, s.TCs)
		}
		// The driver's own state, besides the agent's report.
		d, ok, err := simstate.Find(env.SimStateDir, s.NIC, s.ID)
		if err != nil || !ok {
			t.Fatalf("pod %s: service %s/%d in the driver: found %v, %v", v.Key, s.NIC, s.ID, ok, err)
		}
		if d.TCs != "0x6" {
			t.Errorf("pod %s: the driver has service %s/%d with classes %s, want 0x6", v.Key, s.NIC, s.ID, d.TCs)
		}
		for res, n := range want {
			if s.Reserved[res] != n || d.Reserved[res] != n {
				t.Errorf("pod %s: service %s/%d reserves %d %s as reported, %d in the driver; want %d (8 ranks)", v.Key, s.NIC, s.ID, s.Reserved[res], res, d.Reserved[res], n)
			}
		}
	}

	other := newNamespace(t, "opts-denied")
	job = cluster.Job("opts", 1, 1)
	withOptions(job, options)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(other).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's event on the pod names the field and the policy.
	why := waitEvent(t, ctx, other, "Pod", "", "CXIBindRefused")
	for _, want := range []string{"BULK_DATA is not allowed", "trafficClasses[1]", "jobOptions.trafficClasses"} {
		if !strings.Contains(why, want) {
			t.Errorf("the refusal %q does not say %q", why, want)
		}
	}
}

// TestStorageVNI: a pod of the namespace allowed to join the storage VNI
// that asks for it has services carrying its job VNI and then the storage
// VNI, in the driver's state and as the agent reports them, and
// SLINGSHOT_VNIS to match in its environment and env file; the same Job in
// another namespace is refused at PreStart with an event naming the
// policy.
func TestStorageVNI(t *testing.T) {
	ctx := t.Context()
	if err := env.WaitNICsFree(ctx); err != nil {
		t.Fatal(err)
	}
	const options = `{"vnis":["storage"]}`

	ns := fixedNamespace(t, hpcNamespace)
	job := cluster.Job("storage", 1, 2)
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
	checkIsolated(t, v, 2)
	want := []uint16{v.JobVNI, storageVNI}
	if wantEnv := fmt.Sprintf("%d,%d", v.JobVNI, storageVNI); v.EnvVNIs != wantEnv {
		t.Errorf("pod %s: SLINGSHOT_VNIS=%q, want %q (the job VNI, then the storage VNI)", v.Key, v.EnvVNIs, wantEnv)
	}
	for _, s := range v.Services {
		if !slices.Equal(s.VNIs, want) {
			t.Errorf("pod %s: the agent reports service %s/%d with VNIs %v, want %v", v.Key, s.NIC, s.ID, s.VNIs, want)
		}
		// The driver's own state, not the agent's word.
		got, ok, err := simstate.Find(env.SimStateDir, s.NIC, s.ID)
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			t.Errorf("pod %s: service %s/%d is not in the driver", v.Key, s.NIC, s.ID)
		case !slices.Equal(got.VNIs, want) || !got.OnlyNetns(v.Netns):
			t.Errorf("pod %s: the driver has service %s/%d with VNIs %v and netns %v, want VNIs %v and netns [%d]",
				v.Key, s.NIC, s.ID, got.VNIs, got.NetNS, want, v.Netns)
		}
	}

	other := newNamespace(t, "storage-denied")
	job = cluster.Job("storage", 1, 1)
	withOptions(job, options)
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(other).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why := waitEvent(t, ctx, other, "Pod", "", "CXIBindRefused")
	for _, want := range []string{"vnis[0]", `may not join VNI "storage"`, "jobOptions.extraVNIs"} {
		if !strings.Contains(why, want) {
			t.Errorf("the refusal %q does not say %q", why, want)
		}
	}
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
	ns := newNamespace(t, "tle")
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

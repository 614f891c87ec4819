package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// hpcNamespace is the namespace the node's jobOptions grant BULK_DATA
// (TestMain's values): a fixed name, since the policy names namespaces.
const hpcNamespace = "e2e-hpc"

// jobOptionsValues is the agent configuration TestMain installs: BULK_DATA
// for hpcNamespace alone, the other bounds the defaults.
func jobOptionsValues() map[string]any {
	return map[string]any{
		"trafficClasses": map[string]any{"namespaces": map[string]any{hpcNamespace: []any{"BULK_DATA"}}},
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
// the end, waiting for it to go so that a rerun can make it again.
func fixedNamespace(t *testing.T, name string) string {
	t.Helper()
	ctx := t.Context()
	c := env.Node.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = env.DeleteNamespace(ctx, name)
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
		for res, n := range want {
			if s.Reserved[res] != n {
				t.Errorf("pod %s: service %s/%d reserves %d %s, want %d (8 ranks)", v.Key, s.NIC, s.ID, s.Reserved[res], res, n)
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

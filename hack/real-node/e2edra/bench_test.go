package e2edra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// BenchmarkAllocatedToStarted: the time from a pod's device allocation to
// its container running, both seen by watches of the API server: with DRA
// from the pod's claim getting status.allocation to the container
// running; with the device plugin (-node-api=deviceplugin) from the pod's
// PodScheduled condition (the kubelet allocates at admission) to the
// container running. The pods (one NIC each: a claim from a template, or
// hpe.com/cxi: 1) are made one after another, each deleted, with its
// claim, before the next, as BenchmarkPodStart of package e2e does; the
// figures are p50, p95 and the maximum. Run with
//
//	make bench-node-dra   # both modes, 50 pods each
//
// or one mode:
//
//	go test ./e2edra -run '^$' -bench AllocatedToStarted -benchtime 50x -args -node-api=dra
func BenchmarkAllocatedToStarted(b *testing.B) {
	ctx := b.Context()
	ns, tmpl, sw := benchSetup(b, "bench")
	pods := env.Node.Client.CoreV1().Pods(ns)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)}, Spec: *tmpl.Spec.DeepCopy()}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		allocated, started, err := sw.Wait(wctx, pod.Name)
		cancel()
		if err != nil {
			b.Fatalf("%v\n%s", err, env.Describe(ctx))
		}
		took = append(took, started.Sub(allocated))
		created, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := waitPodAndClaimsGone(ctx, created); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("allocated→started, api %s, %d pods: %s\n", *apiFlag, len(took), reportLatencies(b, took))
	// The agent's footprint after the pods (a remote controller: the
	// chart's, in its own pod).
	rss, peak, anon, err := cluster.AgentMemory()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rss)/(1<<20), "agent-rss-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "agent-peak-rss-MiB")
	fmt.Printf("agent memory, api %s: RSS %.1f MiB (anonymous %.1f MiB), peak %.1f MiB\n", *apiFlag,
		float64(rss)/(1<<20), float64(anon)/(1<<20), float64(peak)/(1<<20))
}

// benchSetup makes a namespace (named from prefix) for the benchmark,
// gone when it ends, and returns it with the pod template of the node's
// mode (a NIC: a claim from a template, or hpe.com/cxi: 1) and a watch of
// its pods' starts.
func benchSetup(b *testing.B, prefix string) (string, corev1.PodTemplateSpec, *cluster.StartWatch) {
	b.Helper()
	ctx := b.Context()
	ns := env.TestNamespace(b, prefix)
	tmpl := cluster.Job("x", 1, 1).Spec.Template
	if *apiFlag == cluster.APIDRA {
		if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.NICClaimTemplate("nic", 1, "pod"), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		tmpl = cluster.Job("x", 1, 0).Spec.Template
		cluster.WithClaimTemplate(&tmpl.Spec, "nic")
	}
	sw, err := env.WatchStarts(ctx, ns)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sw.Close)
	return ns, tmpl, sw
}

// waitPodAndClaimsGone waits until pod and the claims made for it are
// gone from the API server, so that its NIC is free for the next.
func waitPodAndClaimsGone(ctx context.Context, pod *corev1.Pod) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := env.Node.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			last = fmt.Sprintf("pod %s still there (%v)", pod.Name, err)
			return false, nil
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			if _, err := env.Node.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				last = fmt.Sprintf("claim %s still there (%v)", *st.ResourceClaimName, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)\n%s", err, last, env.Describe(ctx))
	}
	return nil
}

// sharedPods is how many pods BenchmarkSharedNICsStart starts at once on
// the node's 4 NICs (issue 34: 8 per NIC).
const sharedPods = 32

// BenchmarkSharedNICsStart: 32 pods made at once, each with a NIC (a claim
// of its own from a template, shared NICs; or hpe.com/cxi: 1 with
// -node-api=deviceplugin, the NICs' device-plugin shares), on the node's
// 4 NICs: from each pod's creation to its container running, p50, p95
// and the maximum, and until all run. Run with
//
//	go test ./e2edra -run '^$' -bench SharedNICsStart -benchtime 1x -args -node-api=dra
func BenchmarkSharedNICsStart(b *testing.B) {
	ctx := b.Context()
	ns, tmpl, sw := benchSetup(b, "bench-shared")
	pods := env.Node.Client.CoreV1().Pods(ns)
	var took, all []time.Duration
	for i := 0; b.Loop(); i++ {
		created := map[string]time.Time{}
		for j := range sharedPods {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%d-p%d", i, j)}, Spec: *tmpl.Spec.DeepCopy()}
			created[pod.Name] = time.Now()
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		var last time.Duration
		var made []*corev1.Pod
		for name, at := range created {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			_, started, err := sw.Wait(wctx, name)
			cancel()
			if err != nil {
				b.Fatalf("pod %s: %v\n%s", name, err, env.Describe(ctx))
			}
			took = append(took, started.Sub(at))
			last = max(last, started.Sub(at))
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			made = append(made, p)
		}
		all = append(all, last)
		for _, p := range made {
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		for _, p := range made {
			if err := waitPodAndClaimsGone(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(slices.Max(all).Microseconds())/1000, "all-running-ms")
	fmt.Printf("created→running, api %s, %d pods at once on %d NICs: %s\n", *apiFlag, sharedPods, nics, reportLatencies(b, took))
}

// reportLatencies reports the p50, p95 and maximum of took as the
// benchmark's metrics (ns/op means nothing here) and says them in words.
func reportLatencies(b *testing.B, took []time.Duration) string {
	slices.Sort(took)
	p := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
	b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p(0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
	return fmt.Sprintf("p50 %s, p95 %s, max %s", p(0.50).Round(time.Millisecond), p(0.95).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

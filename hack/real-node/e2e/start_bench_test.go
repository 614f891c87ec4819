package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// BenchmarkPodStart: the agent's overhead on pod start, from the pod's
// creation to Running (every container started), for a pod with one NIC
// against the same pod without the resource; pods one after another, each
// deleted before the next. Run with
//
//	make e2e-node E2E_NODE_FLAGS='-run ^$ -bench PodStart -benchtime 50x'
func BenchmarkPodStart(b *testing.B) {
	for _, nics := range []int{0, 1} {
		b.Run(fmt.Sprintf("nics=%d", nics), func(b *testing.B) {
			ctx := b.Context()
			ns, err := env.NewNamespace(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer env.DeleteNamespace(context.WithoutCancel(ctx), ns)
			tmpl := cluster.Job("x", 1, nics).Spec.Template
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)}, Spec: *tmpl.Spec.DeepCopy()}
				d, err := startPod(ctx, ns, pod)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, d)
				if err := env.Node.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
		})
	}
}

// startPod creates pod in ns and returns the time until it is Running
// with every container started, polled every 20 ms.
func startPod(ctx context.Context, ns string, pod *corev1.Pod) (time.Duration, error) {
	c := env.Node.Client.CoreV1().Pods(ns)
	start := time.Now()
	if _, err := c.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, false, func(ctx context.Context) (bool, error) {
		p, err := c.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || !cluster.Started(p) {
			return false, nil
		}
		took = time.Since(start)
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("pod %s running: %w\n%s", pod.Name, err, env.Describe(ctx))
	}
	return took, nil
}

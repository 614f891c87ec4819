package e2edra

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRASharedClaimSecondPodRefused (issue 24, defect 1): two pods name
// one ResourceClaim. The kubelet prepares it once, for the first pod,
// whose container runs; the second pod's container is refused by the
// agent's container guard (its CDI spec's claim marker names the claim),
// never starts, and an event on it names the claim and the fix.
func TestDRASharedClaimSecondPodRefused(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-shared")
	tmpl := cluster.NICClaimTemplate("shared", 1, "pod")
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: tmpl.Spec.Spec}
	if _, err := env.Node.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		j := cluster.Job(name, 1, 0)
		spec := j.Spec.Template.Spec
		spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: cluster.ClaimName, ResourceClaimName: ptr.To("shared")}}
		spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: cluster.ClaimName}}
		env.WithServiceCheck(&spec)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e-shared": name}}, Spec: spec}
	}
	if _, err := env.Node.Client.CoreV1().Pods(ns).Create(ctx, pod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitRunning(ctx, ns, "e2e-shared=first", 1); err != nil {
		t.Fatalf("first pod: %v\n%s", err, env.Describe(ctx))
	}
	if _, err := env.Node.Client.CoreV1().Pods(ns).Create(ctx, pod("second"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodWarning(t, ctx, ns, "second", "names the claim and the fix", func(msg string) bool {
		return strings.Contains(msg, ns+"/shared") && strings.Contains(msg, "ResourceClaimTemplate")
	})
	second, err := env.Node.Client.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cluster.Started(second) {
		t.Fatalf("the second pod's container started: %+v", second.Status.ContainerStatuses)
	}
	first, err := env.Node.Client.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !cluster.Started(first) {
		t.Fatalf("the first pod's container is not running: %+v", first.Status.ContainerStatuses)
	}
	// The claim's services stay the first pod's alone.
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Claims {
		if c.Namespace == ns && c.Name == "shared" {
			if c.State != "bound" || c.BoundPod != string(first.UID) {
				t.Fatalf("claim %s/shared: %+v, want bound to the first pod %s", ns, c, first.UID)
			}
			return
		}
	}
	t.Fatalf("the agent does not list claim %s/shared: %+v", ns, rep.Claims)
}

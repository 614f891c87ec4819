package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// The kubelet's PodResources List counters (every consumer on the node;
// the agent is the only one here).
const (
	listRequests = "kubelet_pod_resources_endpoint_requests_list"
	listErrors   = "kubelet_pod_resources_endpoint_errors_list"
)

// TestBurst: 30 pods created at once (the NIC shares fit them all): every
// container starts on its first PreStart, with no FailedPrestart or
// CreateContainerError event, and the agent's PodResources calls stay
// well under the kubelet's limit (100/s, burst 10).
func TestBurst(t *testing.T) {
	const pods = 30
	ctx := t.Context()
	ns := env.TestNamespace(t, "burst")
	if err := env.WaitAllocatable(ctx, env.Capacity); err != nil {
		t.Fatal(err)
	}
	// Earlier tests' pods may still be going: all 30 must fit at once.
	if err := env.WaitNICsFree(ctx); err != nil {
		t.Fatal(err)
	}
	reqs0, err := env.Node.KubeletMetric(ctx, listRequests)
	if err != nil {
		t.Fatal(err)
	}
	cdiWaits := func(result string) float64 {
		n, err := env.AgentCounter(ctx, "slingshot_agent_cdi_visible_seconds", map[string]string{"result": result})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	visible0, timeouts0 := cdiWaits("visible"), cdiWaits("timeout")
	start := time.Now()
	if _, err := env.RunJob(ctx, ns, cluster.Job("burst", pods, 1)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	reqs, err := env.Node.KubeletMetric(ctx, listRequests)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := env.Node.KubeletMetric(ctx, listErrors)
	if err != nil {
		t.Fatal(err)
	}
	calls := reqs - reqs0
	t.Logf("%d pods running in %s; PodResources List calls: %.0f (%.2f per pod, %.1f/s); List errors on the node: %.0f",
		pods, took.Round(time.Millisecond), calls, calls/pods, calls/took.Seconds(), errs)
	if errs > 0 {
		t.Errorf("the kubelet answered %.0f PodResources Lists with an error", errs)
	}
	// PreStart's wait for its CDI spec to be resolvable (cdispec.WaitVisible).
	t.Logf("CDI specs seen resolvable before PreStart returned: %.0f, given up on: %.0f", cdiWaits("visible")-visible0, cdiWaits("timeout")-timeouts0)
	if calls/took.Seconds() > 20 {
		t.Errorf("%.1f PodResources Lists/s during the burst, want well under the kubelet's 100/s", calls/took.Seconds())
	}
	evs, err := env.Node.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Type == corev1.EventTypeWarning {
			t.Errorf("warning event %s on %s: %s", ev.Reason, ev.InvolvedObject.Name, ev.Message)
		}
	}
	list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("pod %s: container restarted %d times", p.Name, cs.RestartCount)
			}
		}
	}
}

// TestHostNetworkRefused: a hostNetwork pod asking for a NIC: its
// container does not start, an event says why, and no service exists for
// it (a service with the host's namespace as member would admit every
// process of the node).
func TestHostNetworkRefused(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "hostnet")
	job := cluster.Job("hostnet", 1, 1)
	job.Spec.Template.Spec.HostNetwork = true
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why, err := env.WaitPodWarning(ctx, ns, "", func(msg string) bool { return strings.Contains(msg, "host network") })
	if err != nil {
		t.Fatalf("no event says the host network was refused: %v\n%s", err, env.Describe(ctx))
	}
	t.Logf("event: %s", why)
	list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil && cs.State.Terminated.StartedAt.Time.After(time.Time{}) {
				t.Errorf("pod %s: container started: %+v", p.Name, cs.State)
			}
		}
		for _, s := range cluster.ReportedServices(rep, p.Namespace+"/"+p.Name) {
			t.Errorf("pod %s: service %s/%d exists (members %v)", p.Name, s.NIC, s.ID, s.Members)
		}
	}
}

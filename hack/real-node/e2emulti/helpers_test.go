package e2emulti

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// podVNIPool is the controller's pool of pod-scoped VNIs
// (controller/slices.PodVNIPool).
const podVNIPool = "pod-vni"

// nodeEnv is the Env of the node named name.
func nodeEnv(t *testing.T, name string) *cluster.Env {
	t.Helper()
	for _, ne := range env.Nodes() {
		if ne.Node.Name == name {
			return ne
		}
	}
	t.Fatalf("no node %q among %d", name, len(env.Nodes()))
	return nil
}

// spread makes a Job's pods go one to a node: a required anti-affinity
// between the Job's pods on the node's host name. With as many pods as
// nodes, each node runs one.
func spread(j *batchv1.Job) *batchv1.Job {
	j.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-job": j.Name}},
			TopologyKey:   corev1.LabelHostname,
		}},
	}}
	return j
}

// onNode pins a Job's pods to the node named name.
func onNode(j *batchv1.Job, name string) *batchv1.Job {
	j.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: name}
	return j
}

// withVNIScope sets the pods' VNI scope (annotation slingshot.hpe.com/vni).
func withVNIScope(j *batchv1.Job, scope string) *batchv1.Job {
	if j.Spec.Template.Annotations == nil {
		j.Spec.Template.Annotations = map[string]string{}
	}
	j.Spec.Template.Annotations["slingshot.hpe.com/vni"] = scope
	return j
}

// runSpread runs a Job of one one-NIC pod on each node and returns its
// pods by node name.
func runSpread(t *testing.T, ns string, j *batchv1.Job) map[string]corev1.Pod {
	t.Helper()
	pods, err := env.RunJob(t.Context(), ns, j)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = p
	}
	if len(byNode) != len(env.Nodes()) {
		t.Fatalf("job %s: pods on nodes %v, want one on each of %d", j.Name, slices.Sorted(maps.Keys(byNode)), len(env.Nodes()))
	}
	return byNode
}

// nodeServices lists the services of every NIC of the node's simulated
// driver, but the driver's own: the default service (disabled by the
// agent) and the system ones.
func nodeServices(t *testing.T, ne *cluster.Env) []simstate.Service {
	t.Helper()
	svcs, err := ne.DriverServices()
	if err != nil {
		t.Fatal(err)
	}
	var out []simstate.Service
	for _, s := range svcs {
		if !s.System && s.ID != uapi.DefaultSvcID {
			out = append(out, s)
		}
	}
	return out
}

// servicesWithVNI lists the node's services that carry vni.
func servicesWithVNI(t *testing.T, ne *cluster.Env, vni uint16) []simstate.Service {
	t.Helper()
	var out []simstate.Service
	for _, s := range nodeServices(t, ne) {
		if slices.Contains(s.VNIs, vni) {
			out = append(out, s)
		}
	}
	return out
}

// lease is the controller's lease of vni, nil when none carries it.
func lease(t *testing.T, vni uint16) *apiv1.JobVNILease {
	t.Helper()
	vnis, err := env.VNIs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range vnis.Leases {
		if uint16(l.Vni) == vni {
			return l
		}
	}
	return nil
}

// holders are the nodes holding vni's lease, sorted; none without one.
func holders(l *apiv1.JobVNILease) []string {
	if l == nil {
		return nil
	}
	return slices.Sorted(slices.Values(l.Nodes))
}

// quarantined reports whether the controller holds vni in quarantine.
func quarantined(t *testing.T, vni uint16) bool {
	t.Helper()
	left, err := env.VNIsQuarantined(vni)(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return left == ""
}

// waitFor polls cond every 200 ms until it holds or timeout passes; the
// failure says what and cond's last word.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)\n%s", what, err, last, env.Describe(t.Context()))
	}
}

// allNodeNames are the cluster's node names, sorted.
func allNodeNames() []string {
	var out []string
	for _, ne := range env.Nodes() {
		out = append(out, ne.Node.Name)
	}
	return slices.Sorted(slices.Values(out))
}

// agentProcess is the PID of the agent of the node, found among the
// processes of the node's PID namespace by its command name.
func agentProcess(t *testing.T, ne *cluster.Env) int {
	t.Helper()
	initPID := ne.Node.InitPID()
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		t.Fatalf("%s: PID namespace of its init %d: %v", ne.Node.Name, initPID, err)
	}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "slingshot-agent" {
			continue
		}
		if ns, err := os.Readlink(filepath.Join(d, "ns", "pid")); err != nil || ns != want {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		found = append(found, pid)
	}
	if len(found) != 1 {
		t.Fatalf("%s: agent processes %v, want one", ne.Node.Name, found)
	}
	return found[0]
}

// agentPod is the agent's pod on the node.
func agentPod(t *testing.T, name string) corev1.Pod {
	t.Helper()
	list, err := env.Node.Client.CoreV1().Pods(cluster.Namespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: cluster.AgentSelector, FieldSelector: "spec.nodeName=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("agent pods on %s: %d, want 1", name, len(list.Items))
	}
	return list.Items[0]
}

// restarts sums the restart counts of the pod's containers.
func restarts(p corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// ready reports whether the pod is Ready.
func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// withBackoff lets the Job replace a failed pod instead of failing.
func withBackoff(j *batchv1.Job, n int32) *batchv1.Job {
	j.Spec.BackoffLimit = ptr.To(n)
	return j
}

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// podView is what the node shows of one running pod (cluster.PodView)
// and what the device plugin adds: the services the agent reports for
// it, and its hsn interface.
type podView struct {
	cluster.PodView
	// Services are those the agent reports for the pod: the device plugin
	// names its services by the pod they serve.
	Services []inspect.Service
	// HSN is the pod's hsn interface as the agent reports it, and
	// HSNLink as the pod's network namespace has it: "hsn0 macvlan up
	// [10.150.0.3/16]", "" when it has none.
	HSN, HSNLink string
}

func viewPod(t *testing.T, p corev1.Pod, rep *inspect.Report) podView {
	t.Helper()
	v := podView{PodView: env.ViewPod(t, p)}
	links, err := cluster.Links(t.Context(), fmt.Sprintf("/proc/%d/ns/net", v.App.Pid))
	if err != nil {
		t.Fatalf("pod %s: %v", v.Key, err)
	}
	for _, l := range links {
		if l.Name == cluster.HSNInterface {
			v.HSNLink = fmt.Sprintf("%s %s up=%v %v", l.Name, l.Kind, l.Up, l.Addrs)
		}
	}
	for _, p := range rep.Pods {
		if p.Namespace+"/"+p.Name == v.Key {
			v.HSN = p.HSN
		}
	}
	v.Services = cluster.ReportedServices(rep, v.Key)
	return v
}

// checkIsolated checks one pod's view: its container's VNIs agree in the
// environment (CDI) and the env file, and nics services, in the driver
// and as the agent reports them, are enabled, admit exactly the pod's
// network namespace and carry its VNIs.
func checkIsolated(t *testing.T, v podView, nics int) {
	t.Helper()
	cluster.CheckBound(t, v.PodView, nics)
	cluster.CheckReported(t, v.PodView, v.Services, nics)
}

// nodeState is what must survive restarts of the kubelet, the agent and
// containerd with pods of one Job running: their services, the files
// published for them and the controller's hold on their VNI. Other tests'
// pods may come and go meanwhile, so nothing else is looked at.
type nodeState struct {
	Services map[string]inspect.Service // by pod key + NIC
	EnvFiles map[string]string          // pod key → SLINGSHOT_VNIS in its env file
	HSN      map[string]string          // pod key → its hsn interface, as reported and as in its namespace
	CDISpecs []string                   // of the pods' allocations, those present
	JobVNI   uint16                     // of the pods' Job
	Holders  []string                   // nodes holding JobVNI at the controller
}

// captureState reads the pods' state.
func captureState(t *testing.T, ctx context.Context, pods []corev1.Pod) nodeState {
	t.Helper()
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := nodeState{Services: map[string]inspect.Service{}, EnvFiles: map[string]string{}, HSN: map[string]string{}}
	for _, p := range pods {
		v := viewPod(t, p, rep)
		st.EnvFiles[v.Key] = v.File["SLINGSHOT_VNIS"]
		st.HSN[v.Key] = v.HSN + " | " + v.HSNLink
		st.JobVNI = v.JobVNI()
		for _, s := range v.Services {
			st.Services[v.Key+"@"+s.NIC] = s
		}
	}
	st.CDISpecs = jobSpecs(t, st.JobVNI)
	holders, err := env.VNIHolders(ctx, st.JobVNI)
	if err != nil {
		t.Fatal(err)
	}
	st.Holders = holders
	return st
}

// diffState says how after differs from before, "" when it does not.
func diffState(before, after nodeState) string {
	var out []string
	for k, s := range before.Services {
		a, ok := after.Services[k]
		if !ok || a.ID != s.ID || !slices.Equal(a.Members, s.Members) || !slices.Equal(a.VNIs, s.VNIs) || a.Enabled != s.Enabled {
			out = append(out, fmt.Sprintf("service %s: %+v, now %+v (present %v)", k, s, a, ok))
		}
	}
	for k, v := range before.EnvFiles {
		if after.EnvFiles[k] != v {
			out = append(out, fmt.Sprintf("env file of %s: %q, now %q", k, v, after.EnvFiles[k]))
		}
	}
	for k, v := range before.HSN {
		if after.HSN[k] != v {
			out = append(out, fmt.Sprintf("hsn interface of %s: %q, now %q", k, v, after.HSN[k]))
		}
	}
	if after.JobVNI != before.JobVNI {
		out = append(out, fmt.Sprintf("job VNI %d, now %d", before.JobVNI, after.JobVNI))
	}
	if !slices.Equal(before.CDISpecs, after.CDISpecs) {
		out = append(out, fmt.Sprintf("CDI specs %v, now %v", before.CDISpecs, after.CDISpecs))
	}
	if !slices.Equal(before.Holders, after.Holders) {
		out = append(out, fmt.Sprintf("VNI %d held by %v, now %v", before.JobVNI, before.Holders, after.Holders))
	}
	return strings.Join(out, "\n")
}

// holdsFor watches the node's state for d and fails at the first change:
// what a restart must not do, it would do in that window.
func holdsFor(t *testing.T, ctx context.Context, pods []corev1.Pod, before nodeState, d time.Duration) {
	t.Helper()
	err := env.HoldsFor(ctx, d, func(ctx context.Context) string {
		return diffState(before, captureState(t, ctx, pods))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitCleanedUp waits until the agent has no service, no record and no
// hsn address of any of the pods, and the controller no hold of the node
// on vni; it returns when that was first seen.
func waitCleanedUp(ctx context.Context, pods []string, vni uint16) (time.Time, error) {
	return env.WaitCleanedUp(ctx, cluster.Cleanup{
		VNI: vni, Leftovers: []cluster.Leftover{env.ReportedPods(pods)},
		// Often: TestJobDeletedCleansUp measures the cleanup's lag.
		Interval: 50 * time.Millisecond, Timeout: time.Minute,
	})
}

func podKeys(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// jobSpecs lists the CDI specs whose environment names vni in
// SLINGSHOT_VNIS: the specs of a job's pods. A spec is named by the device
// IDs it serves, and the kubelet hands a freed device to the next pod at
// once, so the next pod's spec may have the name an earlier pod's had
// (rewritten for it): what a spec serves is in it, not in its name.
func jobSpecs(t *testing.T, vni uint16) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(env.Node.CDIDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		e, err := cluster.CDIEnv(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the glob: a gone pod's
		}
		if err != nil {
			t.Fatalf("CDI spec %s: %v", p, err)
		}
		if list, ok := e[engine.EnvVNIs]; ok && slices.Contains(strings.Split(list, ","), strconv.Itoa(int(vni))) {
			out = append(out, p)
		}
	}
	return out
}

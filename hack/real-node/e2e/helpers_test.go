package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// envFile is the agent's per-container env file as the container sees it
// (agent.ContainerDir + "/" + agent.EnvFileName).
const envFile = "/var/run/slingshot/slingshot.env"

// podView is what the node shows of one running pod: its processes, the
// Slingshot values its container got, and the CXI services the agent
// made for it.
type podView struct {
	Key      string // namespace/name
	UID      string
	Netns    uint32 // the pod's network namespace inode, as the host sees it
	EnvVNIs  string // SLINGSHOT_VNIS in the app's environment (CDI)
	FileVNIs string // SLINGSHOT_VNIS in the env file
	JobVNI   uint16 // the first of SLINGSHOT_VNIS
	Services []inspect.Service
	// HSN is the pod's hsn interface as the agent reports it, and
	// HSNLink as the pod's network namespace has it: "hsn0 macvlan up
	// [10.150.0.3/16]", "" when it has none.
	HSN, HSNLink string
}

func viewPod(t *testing.T, p corev1.Pod, rep *inspect.Report) podView {
	t.Helper()
	v := podView{Key: p.Namespace + "/" + p.Name, UID: string(p.UID)}
	procs, err := cluster.PodProcesses(v.UID)
	if err != nil {
		t.Fatal(err)
	}
	var app *cluster.Process
	for i, pr := range procs {
		ino, err := netns.ParseNetnsLink(pr.Netns)
		if err != nil {
			t.Fatalf("pod %s pid %d: %v", v.Key, pr.Pid, err)
		}
		if v.Netns != 0 && ino != v.Netns {
			t.Errorf("pod %s: processes in two network namespaces, %d and %d", v.Key, v.Netns, ino)
		}
		v.Netns = ino
		if strings.HasSuffix(pr.Exe, "/workload") {
			app = &procs[i]
		}
	}
	if app == nil {
		t.Fatalf("pod %s: no workload process among %+v", v.Key, procs)
	}
	v.EnvVNIs = app.Env["SLINGSHOT_VNIS"]
	links, err := cluster.Links(t.Context(), fmt.Sprintf("/proc/%d/ns/net", app.Pid))
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
	file, err := cluster.EnvFile(app.Pid, envFile)
	if err != nil {
		t.Errorf("pod %s: env file: %v", v.Key, err)
	}
	v.FileVNIs = file["SLINGSHOT_VNIS"]
	first, _, _ := strings.Cut(v.FileVNIs, ",")
	if n, err := strconv.ParseUint(first, 10, 16); err == nil {
		v.JobVNI = uint16(n)
	}
	for _, s := range rep.Services {
		if s.Pod == v.Key {
			v.Services = append(v.Services, s)
		}
	}
	return v
}

// checkIsolated checks one pod's view: the CDI environment and the env
// file agree, and each of its services is enabled, admits exactly the
// pod's network namespace, and carries the job's VNI.
func checkIsolated(t *testing.T, v podView, nics int) {
	t.Helper()
	if v.EnvVNIs == "" || v.EnvVNIs != v.FileVNIs {
		t.Errorf("pod %s: SLINGSHOT_VNIS %q in the environment (CDI), %q in %s", v.Key, v.EnvVNIs, v.FileVNIs, envFile)
	}
	if v.JobVNI == 0 {
		t.Errorf("pod %s: no job VNI in %q", v.Key, v.FileVNIs)
	}
	if len(v.Services) != nics {
		t.Errorf("pod %s: %d services, want %d: %+v", v.Key, len(v.Services), nics, v.Services)
	}
	wantMember := fmt.Sprintf("netns=%d", v.Netns)
	for _, s := range v.Services {
		if !s.Enabled || !slices.Equal(s.Members, []string{wantMember}) || !slices.Contains(s.VNIs, v.JobVNI) {
			t.Errorf("pod %s: service %s/%d enabled=%v members=%v vnis=%v; want enabled, members [%s], VNI %d",
				v.Key, s.NIC, s.ID, s.Enabled, s.Members, s.VNIs, wantMember, v.JobVNI)
		}
	}
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

// captureState reads the pods' state; specs are the CDI spec files written
// for them.
func captureState(t *testing.T, ctx context.Context, pods []corev1.Pod, specs []string) nodeState {
	t.Helper()
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := nodeState{Services: map[string]inspect.Service{}, EnvFiles: map[string]string{}, HSN: map[string]string{}}
	for _, p := range pods {
		v := viewPod(t, p, rep)
		st.EnvFiles[v.Key] = v.FileVNIs
		st.HSN[v.Key] = v.HSN + " | " + v.HSNLink
		st.JobVNI = v.JobVNI
		for _, s := range v.Services {
			st.Services[v.Key+"@"+s.NIC] = s
		}
	}
	for _, p := range specs {
		if fileExists(p) {
			st.CDISpecs = append(st.CDISpecs, p)
		}
	}
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
func holdsFor(t *testing.T, ctx context.Context, pods []corev1.Pod, specs []string, before nodeState, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if diff := diffState(before, captureState(t, ctx, pods, specs)); diff != "" {
			t.Fatalf("the node's state changed:\n%s", diff)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitCleanedUp waits until the agent has no service, no record and no
// hsn address of any of the pods, and the controller no hold of the node
// on vni; it returns when that was first seen.
func waitCleanedUp(ctx context.Context, pods []string, vni uint16) (time.Time, error) {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, err := env.Inspect(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, s := range rep.Services {
			if slices.Contains(pods, s.Pod) {
				last = fmt.Sprintf("service %s/%d of %s", s.NIC, s.ID, s.Pod)
				return false, nil
			}
		}
		for _, p := range rep.Pods {
			if slices.Contains(pods, p.Namespace+"/"+p.Name) {
				last = fmt.Sprintf("pod %s/%s %s", p.Namespace, p.Name, p.State)
				return false, nil
			}
		}
		for _, al := range allocations(rep) {
			if slices.Contains(pods, al.Pod) {
				last = fmt.Sprintf("hsn address %s of %s", al.Address, al.Pod)
				return false, nil
			}
		}
		holders, err := env.VNIHolders(ctx, vni)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if slices.Contains(holders, env.Node.Name) {
			last = fmt.Sprintf("VNI %d still held by %v", vni, holders)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("cleanup: %w (last: %s)", err, last)
	}
	return time.Now(), nil
}

func podKeys(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func cdiSpecs(t *testing.T) []string {
	t.Helper()
	specs, err := filepath.Glob(filepath.Join(env.Node.CDIDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// newSpecs lists what is in after and not in before.
func newSpecs(before, after []string) []string {
	var out []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			out = append(out, p)
		}
	}
	return out
}

// waitQuarantined waits until the controller lists vni in quarantine.
func waitQuarantined(ctx context.Context, vni uint16) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		vnis, err := env.VNIs(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, q := range vnis.Quarantined {
			if uint16(q.Vni) == vni {
				return true, nil
			}
		}
		last = fmt.Sprintf("leases %v, quarantined %v", vnis.Leases, vnis.Quarantined)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("VNI %d in quarantine: %w (last: %s)", vni, err, last)
	}
	return nil
}

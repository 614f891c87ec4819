package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/kubectlplugin"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// defaultManifest is the chart rendered with its defaults (make manifests).
const defaultManifest = "../../../deploy/manifests/slingshot.yaml"

// TestKubectlSlingshot runs kubectl slingshot against leases the
// controller's Kubernetes store wrote (kube.Store.Commit, as the
// controller commits them) and pods and nodes on the API server: vnis,
// the real binary with a kubeconfig, in tables and JSON and filtered by
// owner namespace; pod and nodes through the package with the agents'
// reports given (no kubelet runs here, so exec cannot reach an agent:
// the binary's pod must say so); and the chart's slingshot-viewer
// ClusterRole: enough for vnis, and without it a clear refusal.
func TestKubectlSlingshot(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "kplugin")
	team := newNamespace(t, "team")
	cs := kubeClient(t)
	for _, n := range []string{ns, team} {
		// No controller-manager makes the default ServiceAccount that pods
		// are admitted with.
		if _, err := cs.CoreV1().ServiceAccounts(n).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Built first: the ages below count from now.
	bin := pluginBinary(t)
	st, err := kube.New(srv.Config, kube.Options{Namespace: ns, Identity: "t"})
	if err != nil {
		t.Fatal(err)
	}
	jobUID := "0b5f7d2e-1c3a-4e6b-8d9f-2a4c6e8b0d1f"
	podUID := "7c1e3a5b-9d2f-4b6a-8c0e-1f3a5c7e9b2d"
	// Ages a minute off their unit's boundary: the tables' ages stay put
	// while the test runs.
	created := time.Now().Add(-5*time.Minute - 10*time.Second)
	released := created.Add(-5 * time.Minute)
	if err := st.Commit(ctx, []store.Op{
		store.Put(&store.Lease{Key: "job/" + team + "/" + jobUID, VNI: 1042, Scope: store.ScopeJob, Nodes: []string{"n1", "n2"}, Created: created,
			Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: team, Name: "allreduce", UID: jobUID}}, 0),
		store.Put(&store.Lease{Key: "pod/other/" + podUID, VNI: 1044, Scope: store.ScopePod, Created: created,
			Owner: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: "other", Name: "solo", UID: podUID}}, 0),
		store.Put(&store.Quarantine{VNI: 1041, Released: released}, 0),
	}); err != nil {
		t.Fatal(err)
	}
	kc := writeKubeconfig(t)

	t.Run("vnis json", func(t *testing.T) {
		out, err := runPlugin(ctx, bin, "--kubeconfig", kc, "vnis", "--slingshot-namespace", ns, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var v kubectlplugin.VNIs
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		var got []string
		for _, l := range v.Leases {
			got = append(got, fmt.Sprintf("%d %s %s %s/%s %s %v %v", l.VNI, l.Scope, l.Owner.Kind, l.Owner.Namespace, l.Owner.Name, l.Owner.UID,
				l.Nodes, l.Created.Sub(created).Abs() < time.Millisecond))
		}
		for _, q := range v.Quarantine {
			got = append(got, fmt.Sprintf("quarantine %d %v", q.VNI, q.Released.Sub(released).Abs() < time.Millisecond))
		}
		want := []string{
			fmt.Sprintf("1042 job Job %s/allreduce %s [n1 n2] true", team, jobUID),
			fmt.Sprintf("1044 pod Pod other/solo %s [] true", podUID),
			"quarantine 1041 true",
		}
		if !slices.Equal(got, want) {
			t.Errorf("vnis -o json:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("vnis table, and -n for one owner namespace", func(t *testing.T) {
		out, err := runPlugin(ctx, bin, "--kubeconfig", kc, "vnis", "--slingshot-namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		rows := tableRows(out)
		wantRows := [][]string{
			{"VNI", "SCOPE", "OWNER", "NODES", "AGE", "STATUS"},
			{"1042", "job", "Job", team + "/allreduce", "2:", "n1,n2", "5m", "held"},
			{"1044", "pod", "Pod", "other/solo", "0", "5m", "leased,", "no", "node", "holds", "it"},
			{"QUARANTINED", "VNI", "RELEASED"},
			{"1041", "10m", "ago"},
		}
		if fmt.Sprint(rows) != fmt.Sprint(wantRows) {
			t.Errorf("vnis:\n%s\nrows %q, want %q", out, rows, wantRows)
		}
		out, err = runPlugin(ctx, bin, "--kubeconfig", kc, "-n", "other", "vnis", "--slingshot-namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		if rows := tableRows(out); len(rows) != 2 || rows[1][0] != "1044" {
			t.Errorf("vnis -n other:\n%s\nwant the one lease of owner namespace other, no quarantine", out)
		}
	})

	t.Run("vnis where no controller keeps its leases in the API", func(t *testing.T) {
		empty := newNamespace(t, "sqlite")
		_, err := runPlugin(ctx, bin, "--kubeconfig", kc, "vnis", "--slingshot-namespace", empty)
		if err == nil || !strings.Contains(err.Error(), "no StoreJournal found") {
			t.Errorf("vnis in a namespace without the store: %v, want the sqlite explanation", err)
		}
	})

	// The Job's pod on n1, the agent there, and n1 itself.
	agent := runningPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slingshot-agent-x7",
		Labels: map[string]string{"app.kubernetes.io/name": "slingshot", "app.kubernetes.io/component": "agent"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "agent", Image: "slingshot-agent"}}}})
	worker := runningPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "allreduce-0"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "mpi", Image: "mpi"}}}})
	runningPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "stray"},
		Spec: corev1.PodSpec{NodeName: "n9", Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1-" + ns},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "hpe.com/fabric", Value: "degraded", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), node.Name, metav1.DeleteOptions{}) })
	rep := &inspect.Report{Node: "n1", Ready: true,
		NICs: []inspect.NIC{{Name: "cxi0", Healthy: true}, {Name: "cxi1", Reason: "link down"}},
		Services: []inspect.Service{
			{NIC: "cxi0", ID: 12, Enabled: true, VNIs: []uint16{1042}, Members: []string{"netns=4026532000"}, Pod: team + "/allreduce-0"},
			{NIC: "cxi0", ID: 1, Enabled: true, System: true, VNIs: []uint16{1, 10}, Members: []string{"all"}},
		},
		Pods: []inspect.Pod{{Namespace: team, Name: "allreduce-0", UID: string(worker.UID), VNI: 1042, Scope: "job", NICs: []string{"cxi0"},
			State: "running", HSN: "hsn0 10.150.3.7/16 on hsn0"}},
		PodVNIPool: &inspect.Pool{Free: 63, Total: 64}}

	t.Run("pod", func(t *testing.T) {
		fake := &fakeInspector{reports: map[string]*inspect.Report{agent.Name: rep}}
		out, err := runCommand(ctx, kc, fake, "pod", "allreduce-0", "-n", team, "--slingshot-namespace", ns, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var v kubectlplugin.PodView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		got := fmt.Sprintf("%s %d %s %v %s %d", v.Agent, v.VNI, v.Scope, v.NICs, v.HSN, len(v.Services))
		want := fmt.Sprintf("%s/%s 1042 job [cxi0] hsn0 10.150.3.7/16 on hsn0 1", ns, agent.Name)
		if got != want {
			t.Errorf("pod view %q, want %q", got, want)
		}
		if v.Lease == nil || v.Lease.Owner.Kind != "Job" || v.Lease.Owner.Name != "allreduce" || v.Lease.Name != "vni-"+jobUID {
			t.Errorf("pod view's lease %+v, want the Job's, vni-%s", v.Lease, jobUID)
		}
		table, err := runCommand(ctx, kc, fake, "pod", "allreduce-0", "-n", team, "--slingshot-namespace", ns)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(table), " "), "VNI: 1042 (job scope) Lease: vni-"+jobUID+", owner Job "+team+"/allreduce, held by 2: n1,n2") {
			t.Errorf("pod table: %v\n%s", err, table)
		}
		t.Logf("kubectl slingshot pod allreduce-0 -n %s:\n%s", team, table)
		if fake.asked() != agent.Name+","+agent.Name {
			t.Errorf("asked agents %q, want %s", fake.asked(), agent.Name)
		}
	})

	t.Run("pod errors", func(t *testing.T) {
		fake := &fakeInspector{reports: map[string]*inspect.Report{agent.Name: rep}}
		for _, tc := range []struct {
			args []string
			want error
		}{
			{[]string{"pod", "nosuch", "-n", team}, kubectlplugin.ErrPodNotFound},
			{[]string{"pod", "stray", "-n", team}, kubectlplugin.ErrNoAgent},
			{[]string{"pod", agent.Name, "-n", ns}, kubectlplugin.ErrNotServed},
		} {
			_, err := runCommand(ctx, kc, fake, append(tc.args, "--slingshot-namespace", ns)...)
			if !errors.Is(err, tc.want) {
				t.Errorf("%q: %v, want %v", tc.args, err, tc.want)
			}
		}
		// The binary's own exec reaches no kubelet here: the error names
		// the agent and its node.
		_, err := runPlugin(ctx, bin, "--kubeconfig", kc, "pod", "allreduce-0", "-n", team, "--slingshot-namespace", ns)
		if err == nil || !strings.Contains(err.Error(), "exec in agent "+ns+"/"+agent.Name+" on node n1") {
			t.Errorf("pod through exec without a kubelet: %v, want an exec error naming the agent and node", err)
		}
		t.Logf("pod through exec without a kubelet: %v", err)
	})

	t.Run("nodes", func(t *testing.T) {
		// The agent pod is on "n1"; the Node object is n1-<ns> (nodes are
		// cluster-wide, so named apart from other tests').
		agentOnNode := runningPod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slingshot-agent-n1",
			Labels: agent.Labels}, Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "agent", Image: "slingshot-agent"}}}})
		fake := &fakeInspector{reports: map[string]*inspect.Report{agentOnNode.Name: rep}}
		out, err := runCommand(ctx, kc, fake, "nodes", "--slingshot-namespace", ns)
		if err != nil {
			t.Fatal(err)
		}
		var row []string
		for _, r := range tableRows(out) {
			if r[0] == node.Name {
				row = r
			}
		}
		// VERSION: "-", the agent here reports none.
		want := []string{node.Name, "ready", "-", "1/2", "healthy", "cxi1", "(link", "down)", "1", "1", "-", "63/64", "free", "-",
			// The API server's admission taints a new node not ready.
			"hpe.com/fabric=degraded:NoSchedule,node.kubernetes.io/not-ready:NoSchedule"}
		if !slices.Equal(row, want) {
			t.Errorf("nodes:\n%s\nrow %q, want %q", out, row, want)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		role := viewerRole(t)
		role.Name += "-" + ns // cluster-wide: named apart from other runs'
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: team, Name: "viewer"}}}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.WithoutCancel(ctx)
			_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
			_ = cs.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
		})
		viewer, nobody := saToken(t, cs, team, "viewer"), saToken(t, cs, team, "nobody")
		waitAccess(t, "system:serviceaccount:"+team+":viewer",
			authzv1.ResourceAttributes{Verb: "list", Group: "slingshot.hpe.com", Resource: "vnileases"}, true)

		// Cluster-wide, as the plugin reads by default.
		out, err := runPlugin(ctx, bin, "--kubeconfig", writeTokenKubeconfig(t, viewer), "vnis", "-n", team)
		if err != nil {
			t.Fatalf("vnis as slingshot-viewer: %v", err)
		}
		if rows := tableRows(out); len(rows) != 2 || rows[1][0] != "1042" {
			t.Errorf("vnis -n %s as slingshot-viewer:\n%s\nwant the Job's lease", team, out)
		}
		_, err = runPlugin(ctx, bin, "--kubeconfig", writeTokenKubeconfig(t, nobody), "vnis")
		if err == nil || !strings.Contains(err.Error(), "permission denied (bind the ClusterRole slingshot-viewer") {
			t.Errorf("vnis without a role: %v, want the permission error", err)
		}
	})
}

// viewerRole is the chart's ClusterRole slingshot-viewer, as rendered.
func viewerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(defaultManifest)
	if err != nil {
		t.Fatalf("%v (make manifests writes it)", err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "ClusterRole" && meta.Metadata.Name == "slingshot-viewer" {
			var r rbacv1.ClusterRole
			decodeStrict(t, doc, &r)
			return &r
		}
	}
	t.Fatalf("%s holds no ClusterRole slingshot-viewer", defaultManifest)
	return nil
}

func saToken(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// runningPod creates p and marks it running, as a kubelet would.
func runningPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	cs := kubeClient(t)
	p, err := cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeInspector answers for the agents no kubelet runs here.
type fakeInspector struct {
	reports map[string]*inspect.Report // by agent pod name
	mu      sync.Mutex
	names   []string
}

func (f *fakeInspector) Inspect(_ context.Context, agent *corev1.Pod) (*inspect.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names = append(f.names, agent.Name)
	if r, ok := f.reports[agent.Name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("no report for agent %s", agent.Name)
}

func (f *fakeInspector) asked() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.names, ",")
}

// runCommand runs the plugin's command in process, its agents answered
// by in.
func runCommand(ctx context.Context, kubeconfig string, in kubectlplugin.Inspector, args ...string) (string, error) {
	var out bytes.Buffer
	c := &kubectlplugin.Command{Stdout: &out, Stderr: &out, Now: time.Now, Connect: func(o *kubectlplugin.Options) (*kubectlplugin.Cluster, string, error) {
		cl, ns, err := kubectlplugin.Connect(o)
		if err == nil {
			cl.Inspector = in
		}
		return cl, ns, err
	}}
	err := c.Run(ctx, append([]string{"--kubeconfig", kubeconfig}, args...))
	return out.String(), err
}

// runPlugin runs the kubectl-slingshot binary; its error holds stderr.
func runPlugin(ctx context.Context, bin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %q: %w: %s", filepath.Base(bin), args, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// tableRows splits a table's non-empty lines into fields.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows = append(rows, f)
		}
	}
	return rows
}

var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// pluginBinary builds kubectl-slingshot, as make build does, once.
func pluginBinary(t testing.TB) string {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-slingshot")
		if err != nil {
			pluginErr = err
			return
		}
		pluginBin = filepath.Join(dir, "kubectl-slingshot")
		cmd := exec.Command("go", "build", "-o", pluginBin, "./cmd/kubectl-slingshot")
		cmd.Dir = filepath.Join("..", "..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("build kubectl-slingshot: %v\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginBin
}

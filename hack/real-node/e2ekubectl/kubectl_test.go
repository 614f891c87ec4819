package e2ekubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/kubectlplugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestKubectlSlingshot (issue 26): a running Job's VNI and services, as
// `kubectl slingshot vnis` and `kubectl slingshot pod NAME` show them
// with the node's admin kubeconfig: the lease the controller wrote, held
// by the node, and each pod's CXI service on that VNI, checked against
// what the agent's own /inspect and the Job's object say.
func TestKubectlSlingshot(t *testing.T) {
	ctx := t.Context()
	ns, err := env.NewNamespace(ctx, "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DeleteNamespace(context.WithoutCancel(ctx), ns) })
	pods, err := env.RunJob(ctx, ns, cluster.Job("ring", 2, 1))
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	job, err := env.Node.Client.BatchV1().Jobs(ns).Get(ctx, "ring", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plugin := func(args ...string) (string, error) {
		return run(ctx, env.PluginPath(), append([]string{"--kubeconfig", env.Node.Kubeconfig}, args...)...)
	}

	// The lease is written before the pods' services exist; its holders
	// as the node's hold is recorded.
	var lease kubectlplugin.Lease
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, err := plugin("vnis", "-n", ns, "-o", "json")
		var v kubectlplugin.VNIs
		if err == nil {
			err = json.Unmarshal([]byte(out), &v)
		}
		i := slices.IndexFunc(v.Leases, func(l kubectlplugin.Lease) bool {
			return l.Owner.Kind == "Job" && l.Owner.Name == "ring" && l.Owner.UID == string(job.UID) && slices.Contains(l.Nodes, env.Node.Name)
		})
		if err != nil || i < 0 {
			last = fmt.Sprintf("%v: %s", err, out)
			return false, nil
		}
		lease = v.Leases[i]
		return true, nil
	})
	if err != nil {
		t.Fatalf("kubectl slingshot vnis -n %s: no lease of Job ring (uid %s) held by %s: %v; last: %s", ns, job.UID, env.Node.Name, err, last)
	}
	if lease.Scope != "job" || lease.Owner.Namespace != ns || len(pods) != 2 {
		t.Errorf("lease %+v, want scope job, owner namespace %s", lease, ns)
	}
	out, err := plugin("vnis", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl slingshot vnis -n %s:\n%s", ns, out)
	if !strings.Contains(squash(out), fmt.Sprintf("%d job Job %s/ring 1: %s", lease.VNI, ns, env.Node.Name)) {
		t.Errorf("vnis table has no row of the Job's VNI %d held by %s:\n%s", lease.VNI, env.Node.Name, out)
	}

	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		out, err := plugin("pod", p.Name, "-n", ns, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var v kubectlplugin.PodView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		// The agent's own view of the pod's services, read on the node.
		want := cluster.ReportedServices(rep, ns+"/"+p.Name)
		switch {
		case v.VNI != lease.VNI || v.Scope != "job" || v.Node != env.Node.Name:
			t.Errorf("pod %s: VNI %d scope %s node %s, want the Job's %d, job, %s", p.Name, v.VNI, v.Scope, v.Node, lease.VNI, env.Node.Name)
		case v.Lease == nil || v.Lease.Name != lease.Name:
			t.Errorf("pod %s: lease %+v, want %s", p.Name, v.Lease, lease.Name)
		case len(v.Services) != 1 || len(want) != 1 || v.Services[0].ID != want[0].ID || v.Services[0].NIC != want[0].NIC ||
			!slices.Equal(v.Services[0].VNIs, []uint16{lease.VNI}) || !slices.Equal(v.Services[0].Members, want[0].Members):
			t.Errorf("pod %s: services %+v, want the agent's %+v, restricted to VNI %d", p.Name, v.Services, want, lease.VNI)
		case v.HSN == "" || len(v.Addresses) != 1:
			t.Errorf("pod %s: hsn %q, addresses %q; want its hsn interface and address", p.Name, v.HSN, v.Addresses)
		}
	}
	out, err = plugin("pod", pods[0].Name, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl slingshot pod %s -n %s:\n%s", pods[0].Name, ns, out)

	out, err = plugin("nodes")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl slingshot nodes:\n%s", out)
	// NODE AGENT VERSION NICS ...: the agent reports its version.
	found := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == env.Node.Name && f[1] == "ready" && f[2] != "-" && f[3] == "2/2" && f[4] == "healthy" {
			found = true
		}
	}
	if !found {
		t.Errorf("nodes: no ready row of %s with its agent's version and 2 healthy NICs:\n%s", env.Node.Name, out)
	}
}

// squash joins a table's fields with single spaces.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// run runs bin; its error holds stderr.
func run(ctx context.Context, bin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl-slingshot %q (%v): %w: %s", args, time.Since(start).Round(time.Millisecond), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

package e2enri

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// podView is what the node shows of one running pod (cluster.PodView)
// and the services the agent reports for it (the device plugin names its
// services by the pod they serve).
type podView struct {
	cluster.PodView
	Services []inspect.Service
}

func viewPod(t *testing.T, p corev1.Pod, rep *inspect.Report) podView {
	t.Helper()
	v := podView{PodView: env.ViewPod(t, p)}
	v.Services = cluster.ReportedServices(rep, v.Key)
	return v
}

// checkNRIBound checks a running pod of nics NICs: its services, in the
// driver and as the agent reports them, are enabled, admit exactly the
// pod's network namespace and carry its VNIs (cluster.CheckBound,
// CheckReported); its environment names them, SLINGSHOT_SVC_IDS listing
// the services that admit it in SLINGSHOT_DEVICES's order, and agrees with
// the agent's env file; and containerd holds the container as NRI makes
// it (checkFromNRI).
func checkNRIBound(t *testing.T, ctx context.Context, p corev1.Pod, v podView, nics int) {
	t.Helper()
	cluster.CheckBound(t, v.PodView, nics)
	cluster.CheckReported(t, v.PodView, v.Services, nics)
	byNIC := map[string]uint32{}
	for _, s := range v.Admitting {
		byNIC[s.NIC] = s.ID
	}
	var want []string
	for _, nic := range strings.Split(v.Env["SLINGSHOT_DEVICES"], ",") {
		id, ok := byNIC[nic]
		if !ok {
			t.Errorf("pod %s: SLINGSHOT_DEVICES names %s, where no service admits its namespace %d", v.Key, nic, v.Netns)
		}
		want = append(want, fmt.Sprint(id))
	}
	if got := v.Env["SLINGSHOT_SVC_IDS"]; got != strings.Join(want, ",") {
		t.Errorf("pod %s: SLINGSHOT_SVC_IDS %q, want %q: the services admitting its namespace in SLINGSHOT_DEVICES's order (%s)", v.Key, got, strings.Join(want, ","), v.Env["SLINGSHOT_DEVICES"])
	}
	for k, fv := range v.File {
		if v.Env[k] != fv {
			t.Errorf("pod %s: %s=%q in the environment, %q in %s", v.Key, k, v.Env[k], fv, cluster.ContainerEnvFile)
		}
	}
	checkFromNRI(t, ctx, p, v)
}

// lateBound are the variables only PreStartContainer knows: without NRI
// they reach the container through the CDI spec the agent writes then.
var lateBound = []string{"SLINGSHOT_SVC_IDS", "SLINGSHOT_VNIS"}

// checkFromNRI checks the pod's workload container as containerd holds
// it: the kubelet asked for no CDI device and set none of the late-bound
// variables (its CRI configuration: the pod spec's and the Allocate
// answer's), while the OCI spec the runtime made has them, as the
// workload's process does: they came from the agent's answer at the
// runtime's CreateContainer.
func checkFromNRI(t *testing.T, ctx context.Context, p corev1.Pod, v podView) {
	t.Helper()
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: container statuses %+v, want one", v.Key, p.Status.ContainerStatuses)
	}
	rc, err := env.RuntimeContainer(ctx, p.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s in containerd: the kubelet set %v, CDI devices %v", v.Key, rc.KubeletEnv, rc.CDI)
	if len(rc.CDI) > 0 {
		t.Errorf("pod %s: the kubelet asked containerd for CDI devices %v; with NRI the Allocate answer names none", v.Key, rc.CDI)
	}
	if !slices.Contains(rc.KubeletEnv, "SLINGSHOT_DEVICES") {
		t.Errorf("pod %s: the kubelet set %v, without the Allocate answer's SLINGSHOT_DEVICES", v.Key, rc.KubeletEnv)
	}
	for _, k := range lateBound {
		if slices.Contains(rc.KubeletEnv, k) {
			t.Errorf("pod %s: the kubelet set %s, which only PreStartContainer knows", v.Key, k)
		}
		if want := k + "=" + v.Env[k]; v.Env[k] == "" || !slices.Contains(rc.Env, want) {
			t.Errorf("pod %s: the OCI spec's environment lacks %s (the process has %q)", v.Key, want, v.Env[k])
		}
	}
}

// cdiSpecs lists the files of the node's CDI directory.
func cdiSpecs(t *testing.T) []string {
	t.Helper()
	specs, err := filepath.Glob(filepath.Join(env.Node.CDIDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func podKeys(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

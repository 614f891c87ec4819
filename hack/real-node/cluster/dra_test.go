package cluster

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/slingshot-k8s/slingshot/hack/real-node/install"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// TestDRAInstallRenders renders the chart with the values Setup installs
// it with in DRA mode and checks what the agent's DRA contract needs: --api=dra,
// the kubelet's plugin directories and the NRI socket mounted at their
// node paths, an API token, the NIC DeviceClass and the agent's RBAC for
// ResourceSlices.
func TestDRAInstallRenders(t *testing.T) {
	e, manifest := renderInstall(t, Options{API: APIDRA})
	var ds *appsv1.DaemonSet
	var classes []string
	var rules []rbacv1.PolicyRule
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(manifest, -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		switch meta.Kind {
		case "DaemonSet":
			ds = new(appsv1.DaemonSet)
			if err := yaml.Unmarshal([]byte(doc), ds); err != nil {
				t.Fatal(err)
			}
		case "DeviceClass":
			var c resourcev1.DeviceClass
			if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
				t.Fatal(err)
			}
			classes = append(classes, c.Name)
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			rules = append(rules, r.Rules...)
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	spec := ds.Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("agent pod: automountServiceAccountToken %v, want true (the agent publishes ResourceSlices)", spec.AutomountServiceAccountToken)
	}
	hostPaths := map[string]string{} // volume name → host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	agent := spec.Containers[0]
	if !slices.Contains(agent.Args, "--api=dra") {
		t.Errorf("agent args %v: no --api=dra", agent.Args)
	}
	mounted := map[string]bool{} // host paths mounted at the same path
	for _, m := range agent.VolumeMounts {
		if hp, ok := hostPaths[m.Name]; ok && hp == m.MountPath {
			mounted[hp] = true
		}
	}
	for _, want := range []string{
		"/var/lib/kubelet/plugins_registry",
		"/var/lib/kubelet/plugins/" + DRADriver,
	} {
		if !mounted[want] {
			t.Errorf("agent: %s not mounted at its host path; mounts %v", want, agent.VolumeMounts)
		}
	}
	if !mounted[e.Node.NRISocket] && !mounted[filepath.Dir(e.Node.NRISocket)] {
		t.Errorf("agent: the NRI socket %s not mounted at its host path; mounts %v", e.Node.NRISocket, agent.VolumeMounts)
	}
	if nri := "--nri-socket=" + e.Node.NRISocket; !slices.Contains(agent.Args, nri) && !strings.Contains(strings.Join(agent.Args, " "), e.Node.NRISocket) {
		t.Errorf("agent args %v: the NRI socket %s not given", agent.Args, e.Node.NRISocket)
	}
	if !slices.Contains(classes, NICDeviceClass) {
		t.Errorf("DeviceClasses %v: no %s", classes, NICDeviceClass)
	}
	canWriteSlices := false
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "resource.k8s.io") && slices.Contains(r.Resources, "resourceslices") && slices.Contains(r.Verbs, "create") {
			canWriteSlices = true
		}
	}
	if !canWriteSlices {
		t.Errorf("no ClusterRole lets the agent create ResourceSlices: %+v", rules)
	}
}

// renderInstall renders the chart with the values Setup installs it with,
// for a node at a made-up root, and returns the node's Env and the
// manifest. o.Root is set here.
func renderInstall(t *testing.T, o Options) (*Env, string) {
	t.Helper()
	root := "/tmp/real-node-x"
	o.Root = root
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	e := &Env{
		Node: &node.Node{
			Name: "node-1", IP: node.DefaultNodeIP, KubeletDir: "/var/lib/kubelet",
			ContainerdSocket: root + "/run/containerd.sock", NRISocket: root + "/nri/nri.sock", CDIDir: root + "/cdi",
		},
		Machine:        &mocksysfs.Truth{SysRoot: root + "/machine/sys", DevRoot: root + "/machine/dev"},
		ControllerAddr: node.DefaultNodeIP + ":9440",
		IPAMSocket:     root + "/ipam-run/ipam.sock", CNIBinDir: root + "/cni-bin",
		StateDir: root + "/agent-state", opts: o,
	}
	chartDir := filepath.Join(o.RepoDir, "deploy/helm/slingshot")
	defaults, err := install.ChartValues(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	e.draValues, e.chartDRA = draChartValues(defaults)
	if !e.chartDRA {
		t.Fatal("the chart has no api and dra values")
	}
	rel := &install.Release{ChartDir: chartDir, Name: ReleaseName, Namespace: Namespace, Values: e.values()}
	manifest, err := rel.Render(t.Context(), "v1.37.1")
	if err != nil {
		t.Fatal(err)
	}
	return e, manifest
}

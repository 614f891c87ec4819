package cluster

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestDevicePluginNRIInstallRenders renders the chart with the values
// Setup installs it with in device-plugin mode with
// agent.devicePluginNRI, as the e2enri suite does, and checks that the
// agent is told the node's NRI socket (not the chart's default, outside
// the node's root) and has its directory mounted at the same path.
func TestDevicePluginNRIInstallRenders(t *testing.T) {
	e, manifest := renderInstall(t, Options{Values: map[string]any{"agent": map[string]any{"devicePluginNRI": true}}})
	var ds *appsv1.DaemonSet
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(manifest, -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if meta.Kind == "DaemonSet" {
			ds = new(appsv1.DaemonSet)
			if err := yaml.Unmarshal([]byte(doc), ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	spec := ds.Spec.Template.Spec
	agent := spec.Containers[0]
	for _, want := range []string{"--deviceplugin-nri", "--nri-socket=" + e.Node.NRISocket} {
		if !slices.Contains(agent.Args, want) {
			t.Errorf("agent args %v: no %s", agent.Args, want)
		}
	}
	if slices.Contains(agent.Args, "--api=dra") {
		t.Errorf("agent args %v: DRA, want the device plugin", agent.Args)
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	dir := filepath.Dir(e.Node.NRISocket)
	if !slices.ContainsFunc(agent.VolumeMounts, func(m corev1.VolumeMount) bool { return hostPaths[m.Name] == dir && m.MountPath == dir }) {
		t.Errorf("agent: the NRI socket's directory %s not mounted at its host path; mounts %v", dir, agent.VolumeMounts)
	}
}

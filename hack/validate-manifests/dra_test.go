package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// dra is the value that serves the NICs through DRA.
var dra = map[string]any{"api": "dra"}

// withDRA returns dra with the dra block set to block.
func withDRA(block map[string]any) map[string]any {
	return map[string]any{"api": "dra", "dra": block}
}

// The agent's DaemonSet in each API mode: the flags, the API token and
// the host directories of a DRA driver only with api "dra", and the
// device-plugin directories in both.
func TestRenderAPIMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		// wantDriver is the DRA driver's name, "" for api deviceplugin.
		wantDriver, wantNRIDir string
	}{
		{name: "defaults"},
		{name: "deviceplugin", values: map[string]any{"api": "deviceplugin"}},
		{name: "dra", values: dra, wantDriver: "cxi.slingshot.hpe.com", wantNRIDir: "/var/run/nri"},
		{name: "dra moved", values: map[string]any{"api": "dra", "agent": map[string]any{"kubeletDir": "/data/kubelet"},
			"dra": map[string]any{"driverName": "cxi.example.org", "nriSocket": "/run/containerd/nri/nri.sock"}},
			wantDriver: "cxi.example.org", wantNRIDir: "/run/containerd/nri"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, _ := agentDaemonSet(t, tc.values)
			spec := ds.Spec.Template.Spec
			agent := spec.Containers[0]
			kubelet := "/var/lib/kubelet"
			if tc.name == "dra moved" {
				kubelet = "/data/kubelet"
			}
			for _, v := range []string{"device-plugins", "pod-resources"} {
				if hostPathOf(spec, v) == nil || mountOf(agent, v) == "" {
					t.Errorf("volume %s is not mounted", v)
				}
			}
			isDRA := tc.wantDriver != ""
			wantAPI := "--api=deviceplugin"
			if isDRA {
				wantAPI = "--api=dra"
			}
			if !slices.Contains(agent.Args, wantAPI) {
				t.Errorf("agent args %q, want %s", agent.Args, wantAPI)
			}
			token := spec.AutomountServiceAccountToken
			if token == nil || *token != isDRA {
				t.Errorf("automountServiceAccountToken %v, want %v: only a DRA driver calls the Kubernetes API", token, isDRA)
			}
			if !isDRA {
				for _, a := range agent.Args {
					if strings.HasPrefix(a, "--dra-") || strings.HasPrefix(a, "--nri-") {
						t.Errorf("api deviceplugin, but the agent has %s", a)
					}
				}
				for _, v := range []string{"plugins-registry", "dra-plugin", "nri"} {
					if hostPathOf(spec, v) != nil || mountOf(agent, v) != "" {
						t.Errorf("api deviceplugin, but volume %s is there", v)
					}
				}
				return
			}
			for _, want := range []string{"--dra-driver-name=" + tc.wantDriver, "--nri-socket=" + tc.wantNRIDir + "/nri.sock"} {
				if !slices.Contains(agent.Args, want) {
					t.Errorf("agent args %q, want %s", agent.Args, want)
				}
			}
			for v, dir := range map[string]string{
				"plugins-registry": kubelet + "/plugins_registry",
				"dra-plugin":       kubelet + "/plugins/" + tc.wantDriver,
				"nri":              tc.wantNRIDir,
			} {
				hp := hostPathOf(spec, v)
				if hp == nil || hp.Path != dir || hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate || mountOf(agent, v) != dir {
					t.Errorf("%s: hostPath %+v mounted at %q; want %s (DirectoryOrCreate) at the same path", v, hp, mountOf(agent, v), dir)
				}
			}
		})
	}
}

// The agent's RBAC: none with api deviceplugin; with api dra exactly the
// calls of a DRA driver, bound to the agent's ServiceAccount.
func TestRenderAgentRBAC(t *testing.T) {
	def := renderObjects(t, nil)
	for _, k := range []string{"ClusterRole/slingshot-agent", "ClusterRoleBinding/slingshot-agent", "Role/slingshot-agent", "RoleBinding/slingshot-agent"} {
		if _, ok := def[k]; ok {
			t.Errorf("api deviceplugin makes %s; the agent has no RBAC", k)
		}
	}
	objs := renderObjects(t, dra)
	o, ok := objs["ClusterRole/slingshot-agent"]
	if !ok {
		t.Fatal("api dra: no ClusterRole/slingshot-agent")
	}
	var role rbacv1.ClusterRole
	if err := json.Unmarshal(o.JSON, &role); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	}
	got, _ := json.Marshal(role.Rules)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Errorf("rules %s\nwant %s", got, wantJSON)
	}
	o, ok = objs["ClusterRoleBinding/slingshot-agent"]
	if !ok {
		t.Fatal("api dra: no ClusterRoleBinding/slingshot-agent")
	}
	var b rbacv1.ClusterRoleBinding
	if err := json.Unmarshal(o.JSON, &b); err != nil {
		t.Fatal(err)
	}
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != "slingshot-agent" ||
		len(b.Subjects) != 1 || b.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "slingshot-agent", Namespace: releaseNamespace}) {
		t.Errorf("binding %+v to %+v; want ClusterRole slingshot-agent to the agent's ServiceAccount alone", b.RoleRef, b.Subjects)
	}
}

// deviceClasses renders values and returns the DeviceClasses by name.
func deviceClasses(t *testing.T, values map[string]any) map[string]resourcev1.DeviceClass {
	t.Helper()
	out := map[string]resourcev1.DeviceClass{}
	for _, o := range renderObjects(t, values) {
		if o.GVK.Group != "resource.k8s.io" || o.GVK.Kind != "DeviceClass" {
			continue
		}
		var c resourcev1.DeviceClass
		if err := json.Unmarshal(o.JSON, &c); err != nil {
			t.Fatal(err)
		}
		out[c.Name] = c
	}
	return out
}

// The DeviceClasses: a NIC class and a GPU class named after the driver,
// selecting its devices by their "type" attribute; the NIC class carries
// the extended resource name when that is enabled; none without api dra
// or with deviceClasses off.
func TestRenderDeviceClasses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		values   map[string]any
		driver   string // "": no classes
		extended string // the NIC class's extendedResourceName
	}{
		{name: "deviceplugin"},
		{name: "dra", values: dra, driver: "cxi.slingshot.hpe.com", extended: "hpe.com/cxi"},
		{name: "dra, own driver and resource", values: withDRA(map[string]any{"driverName": "cxi.example.org", "extendedResource": map[string]any{"name": "example.org/nic"}}),
			driver: "cxi.example.org", extended: "example.org/nic"},
		{name: "dra without extended resource", values: withDRA(map[string]any{"extendedResource": map[string]any{"enabled": false}}), driver: "cxi.slingshot.hpe.com"},
		{name: "dra without classes", values: withDRA(map[string]any{"deviceClasses": false, "extendedResource": map[string]any{"enabled": false}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			classes := deviceClasses(t, tc.values)
			if tc.driver == "" {
				if len(classes) != 0 {
					t.Errorf("DeviceClasses %v; want none", slices.Sorted(maps.Keys(classes)))
				}
				return
			}
			if len(classes) != 2 {
				t.Errorf("DeviceClasses %v; want the NIC and GPU classes", slices.Sorted(maps.Keys(classes)))
			}
			for name, typ := range map[string]string{tc.driver: "nic", "gpu." + tc.driver: "gpu"} {
				c, ok := classes[name]
				if !ok {
					t.Errorf("no DeviceClass %s", name)
					continue
				}
				want := `device.driver == "` + tc.driver + `" && device.attributes["` + tc.driver + `"].type == "` + typ + `"`
				if len(c.Spec.Selectors) != 1 || c.Spec.Selectors[0].CEL == nil || c.Spec.Selectors[0].CEL.Expression != want {
					t.Errorf("%s: selectors %+v; want the one CEL selector %s", name, c.Spec.Selectors, want)
				}
				ext := ""
				if c.Spec.ExtendedResourceName != nil {
					ext = *c.Spec.ExtendedResourceName
				}
				wantExt := ""
				if typ == "nic" {
					wantExt = tc.extended
				}
				if ext != wantExt {
					t.Errorf("%s: extendedResourceName %q, want %q", name, ext, wantExt)
				}
			}
		})
	}
}

// The API and DRA values the chart refuses, each naming the value at
// fault.
func TestRenderRefusesDRA(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unknown api":              {map[string]any{"api": "both"}, `api "both": want deviceplugin or dra`},
		"api in capitals":          {map[string]any{"api": "DRA"}, `api "DRA": want deviceplugin or dra`},
		"driver name in capitals":  {withDRA(map[string]any{"driverName": "CXI.slingshot.hpe.com"}), "dra.driverName CXI.slingshot.hpe.com: want a DNS subdomain"},
		"driver name with a quote": {withDRA(map[string]any{"driverName": `cxi"x`}), "want a DNS subdomain"},
		"driver name too long":     {withDRA(map[string]any{"driverName": strings.Repeat("c", 60) + ".hpe.com"}), "at most 63 characters"},
		"empty driver name":        {withDRA(map[string]any{"driverName": ""}), "want a DNS subdomain"},
		"relative NRI socket":      {withDRA(map[string]any{"nriSocket": "nri/nri.sock"}), `dra.nriSocket "nri/nri.sock": want an absolute path`},
		"no NRI socket":            {withDRA(map[string]any{"nriSocket": ""}), `dra.nriSocket ""`},
		"NRI socket in /":          {withDRA(map[string]any{"nriSocket": "/nri.sock"}), "in a directory other than /"},
		"extended without classes": {withDRA(map[string]any{"deviceClasses": false}), "dra.extendedResource.enabled needs dra.deviceClasses"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(ch, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
	// Neither is checked with api deviceplugin.
	if _, err := Render(ch, map[string]any{"dra": map[string]any{"driverName": "", "nriSocket": "", "deviceClasses": false}}); err != nil {
		t.Errorf("api deviceplugin with unused dra values: %v", err)
	}
}

// api dra on a cluster that does not serve resource.k8s.io/v1 is refused
// with a message that says so (rather than Helm's "no matches for kind
// DeviceClass" halfway through an install).
func TestRenderRefusesDRAWithoutAPI(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	caps.APIVersions = slices.DeleteFunc(slices.Clone(caps.APIVersions), func(v string) bool { return strings.HasPrefix(v, "resource.k8s.io/v1/") || v == "resource.k8s.io/v1" })
	if caps.APIVersions.Has("resource.k8s.io/v1") {
		t.Fatal("could not remove resource.k8s.io/v1 from the capabilities")
	}
	vals, err := chartutil.ToRenderValues(ch, dra, chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.Engine{Strict: true}.Render(ch, vals)
	if want := "api=dra needs a cluster that serves resource.k8s.io/v1"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err %v; want one containing %q", err, want)
	}
}

package main

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/slingshot-k8s/slingshot/internal/draclaim"
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
			if token == nil || !*token {
				t.Errorf("automountServiceAccountToken %v, want true: the agent writes events and taints its node in both modes", token)
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

// The agent's RBAC: in both modes events and its node (get, and patch
// for the cleanup-stuck taint, which the node policy confines); with api
// dra besides exactly the calls of a DRA driver; bound to the agent's
// ServiceAccount, and no namespaced Role.
func TestRenderAgentRBAC(t *testing.T) {
	common := []rbacv1.PolicyRule{
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		// A pod's service-options annotation, where the runtime did not
		// report it with the sandbox.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []rbacv1.PolicyRule
	}{
		{"deviceplugin", nil, common},
		{"dra", dra, append(slices.Clone(common),
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{"cxi.slingshot.hpe.com"},
				Verbs: []string{"associated-node:patch", "associated-node:update"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderObjects(t, tc.values)
			for _, k := range []string{"Role/slingshot-agent", "RoleBinding/slingshot-agent"} {
				if _, ok := objs[k]; ok {
					t.Errorf("the chart makes %s", k)
				}
			}
			for _, k := range []string{"ValidatingAdmissionPolicy/slingshot-agent-nodes", "ValidatingAdmissionPolicyBinding/slingshot-agent-nodes"} {
				if _, ok := objs[k]; !ok {
					t.Errorf("no %s: RBAC alone lets an agent patch any node", k)
				}
			}
			checkAgentRole(t, objs, tc.want)
		})
	}
}

func checkAgentRole(t *testing.T, objs map[string]*Object, want []rbacv1.PolicyRule) {
	t.Helper()
	o, ok := objs["ClusterRole/slingshot-agent"]
	if !ok {
		t.Fatal("no ClusterRole/slingshot-agent")
	}
	var role rbacv1.ClusterRole
	if err := json.Unmarshal(o.JSON, &role); err != nil {
		t.Fatal(err)
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

// The DeviceClass: one NIC class named after the driver (which publishes
// no GPUs), selecting its devices by their "type" attribute and carrying
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
			c, ok := classes[tc.driver]
			if len(classes) != 1 || !ok {
				t.Fatalf("DeviceClasses %v; want the NIC class %s alone", slices.Sorted(maps.Keys(classes)), tc.driver)
			}
			want := `device.driver == "` + tc.driver + `" && device.attributes["` + tc.driver + `"].type == "nic"`
			if len(c.Spec.Selectors) != 1 || c.Spec.Selectors[0].CEL == nil || c.Spec.Selectors[0].CEL.Expression != want {
				t.Errorf("selectors %+v; want the one CEL selector %s", c.Spec.Selectors, want)
			}
			ext := ""
			if c.Spec.ExtendedResourceName != nil {
				ext = *c.Spec.ExtendedResourceName
			}
			if ext != tc.extended {
				t.Errorf("extendedResourceName %q, want %q", ext, tc.extended)
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

// objectsOf decodes a YAML stream.
func objectsOf(t *testing.T, stream string) []*Object {
	t.Helper()
	var objs []*Object
	for _, doc := range splitDocuments([]byte(stream)) {
		o, err := Decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

// CheckDRA refuses what the API server would (a selector that does not
// compile, a config or constraint naming no request of its claim, a
// container naming no claim of its pod) and what would not work with the
// chart (a class of its driver's domain that it does not make, a config
// for another driver, a template the example does not make); another
// driver's class, a GPU vendor's, is not the chart's to check.
func TestCheckDRA(t *testing.T) {
	chartDRA := DRA{Driver: "cxi.slingshot.hpe.com", Classes: map[string]bool{"cxi.slingshot.hpe.com": true}}
	template := func(devices string) string {
		return `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: default}
spec:
  spec:
    devices:
` + devices
	}
	const nic = `      requests:
      - name: nic
        exactly: {deviceClassName: cxi.slingshot.hpe.com}
`
	pod := func(spec string) string {
		return "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n" + spec
	}
	job := func(spec string) string {
		return "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: default}\nspec:\n  template:\n    spec:\n" + indent(spec, "    ")
	}
	const podSpec = `  resourceClaims:
  - {name: nic, resourceClaimTemplateName: t}
  containers:
  - name: c
    image: x
    resources:
      claims: [{name: nic}]
`
	for name, tc := range map[string]struct {
		stream string
		want   string // "": no error
	}{
		"good":     {stream: template(nic+"      config:\n      - requests: [nic]\n        opaque: {driver: cxi.slingshot.hpe.com, parameters: {vni: job}}\n") + pod(podSpec)},
		"good Job": {stream: template(nic) + job(podSpec)},
		"Job's container claim not in pod": {stream: template(nic) + job(strings.Replace(podSpec, "claims: [{name: nic}]", "claims: [{name: nics}]", 1)),
			want: `Job default/j: container c uses claim "nics"`},
		"class the chart does not make": {stream: template("      requests:\n      - name: gpu\n        exactly: {deviceClassName: gpu.cxi.slingshot.hpe.com}\n"),
			want: `DeviceClass "gpu.cxi.slingshot.hpe.com" is not one of the chart's`},
		"class the chart does not make in firstAvailable": {stream: template("      requests:\n      - name: nic\n        firstAvailable:\n        - {name: a, deviceClassName: cxi.slingshot.hpe.com}\n        - {name: b, deviceClassName: fast.cxi.slingshot.hpe.com}\n"),
			want: `firstAvailable[1].deviceClassName: DeviceClass "fast.cxi.slingshot.hpe.com"`},
		"vendor's GPU class":          {stream: template(nic + "      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com}\n      constraints:\n      - matchAttribute: resource.kubernetes.io/pcieRoot\n")},
		"class of a lookalike domain": {stream: template("      requests:\n      - name: nic\n        exactly: {deviceClassName: xcxi.slingshot.hpe.com}\n")},
		"subrequest named":            {stream: template("      requests:\n      - name: nic\n        firstAvailable:\n        - {name: a, deviceClassName: cxi.slingshot.hpe.com}\n      constraints:\n      - {requests: [nic/a, nic], matchAttribute: resource.kubernetes.io/pcieRoot}\n")},
		"bad CEL": {stream: template("      requests:\n      - name: nic\n        exactly:\n          deviceClassName: cxi.slingshot.hpe.com\n          selectors:\n          - cel: {expression: 'device.attributes[\"cxi.slingshot.hpe.com\"].nid >'}\n"),
			want: "exactly.selectors[0].cel.expression"},
		"CEL not bool": {stream: template("      requests:\n      - name: nic\n        exactly:\n          deviceClassName: cxi.slingshot.hpe.com\n          selectors:\n          - cel: {expression: 'device.driver'}\n"),
			want: "cel.expression"},
		"config names no request": {stream: template(nic + "      config:\n      - requests: [nics]\n        opaque: {driver: cxi.slingshot.hpe.com, parameters: {}}\n"),
			want: `spec.devices.config[0].requests names request "nics"`},
		"constraint names no request": {stream: template(nic + "      constraints:\n      - {requests: [gpu], matchAttribute: resource.kubernetes.io/pcieRoot}\n"),
			want: `spec.devices.constraints[0].requests names request "gpu"`},
		"other driver": {stream: template(nic + "      config:\n      - opaque: {driver: gpu.example.com, parameters: {}}\n"),
			want: `opaque.driver "gpu.example.com" is not the chart's driver`},
		"container claim not in pod": {stream: template(nic) + pod(strings.Replace(podSpec, "claims: [{name: nic}]", "claims: [{name: nics}]", 1)),
			want: `container c uses claim "nics"`},
		"template not in file": {stream: pod(podSpec), want: "names ResourceClaimTemplate t, which the file does not make"},
		"claim not in file":    {stream: pod(strings.Replace(podSpec, "resourceClaimTemplateName: t", "resourceClaimName: shared", 1)), want: "names ResourceClaim shared"},
		"bad class CEL": {stream: "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\nspec:\n  selectors:\n  - cel: {expression: 'device.atributes.x'}\n",
			want: "spec.selectors[0].cel.expression"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := CheckDRA(objectsOf(t, tc.stream), chartDRA)
			if tc.want == "" {
				for _, err := range errs {
					t.Error(err)
				}
				return
			}
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors %v; want one containing %q", errs, tc.want)
		})
	}
}

func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(prefix + line)
	}
	return b.String()
}

// The chart's DeviceClasses select the agent's devices by their published
// attributes (the driver's ResourceSlice contract): the NIC class the
// NICs, not a device of another driver (a GPU vendor's GPU on the same
// PCIe root, another driver's NIC).
func TestDeviceClassesSelect(t *testing.T) {
	const driver = "cxi.slingshot.hpe.com"
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }
	num := func(n int64) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{IntValue: &n} }
	nic := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"type": str("nic"), "nid": num(0x1a2b), "linkSpeed": num(200000), "cassiniVersion": str("cassini2"), "hsnNetdev": str("hsn0"),
		"resource.kubernetes.io/pcieRoot": str("pci0000:00"), "resource.kubernetes.io/numaNode": num(0),
	}
	gpu := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"type": str("gpu"), "productName": str("NVIDIA H200"), "resource.kubernetes.io/pcieRoot": str("pci0000:00"),
	}
	devices := map[string]dracel.Device{
		"cxi0":               {Driver: driver, Attributes: nic},
		"gpu-0":              {Driver: "gpu.nvidia.com", Attributes: gpu},
		"other driver's NIC": {Driver: "nic.example.com", Attributes: nic},
	}
	want := map[string]string{driver: "cxi0"}
	classes := deviceClasses(t, dra)
	for name, class := range classes {
		var got []string
		for dev, d := range devices {
			all := true
			for _, s := range class.Spec.Selectors {
				res := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(s.CEL.Expression, dracel.Options{})
				if res.Error != nil {
					t.Fatalf("%s: %v", name, res.Error)
				}
				ok, _, err := res.DeviceMatches(t.Context(), d)
				if err != nil {
					t.Fatalf("%s on %s: %v", name, dev, err)
				}
				all = all && ok
			}
			if all {
				got = append(got, dev)
			}
		}
		if len(got) != 1 || got[0] != want[name] {
			t.Errorf("DeviceClass %s selects %v; want %s alone", name, got, want[name])
		}
	}
	if len(classes) != len(want) {
		t.Errorf("%d DeviceClasses, want %d", len(classes), len(want))
	}
}

// dra.bindingConditions: the agent's devices carry the conditions and the
// controller writes them, with the RBAC of exactly that write; neither
// without it; refused without the controller.
func TestRenderBindingConditions(t *testing.T) {
	writes := rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"},
		ResourceNames: []string{"cxi.slingshot.hpe.com"}, Verbs: []string{"arbitrary-node:patch"}}
	for _, on := range []bool{false, true} {
		objs := renderObjects(t, withDRA(map[string]any{"bindingConditions": on}))
		ds, _ := agentDaemonSet(t, withDRA(map[string]any{"bindingConditions": on}))
		if got := slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--dra-binding-conditions"); got != on {
			t.Errorf("bindingConditions %v: agent --dra-binding-conditions %v", on, got)
		}
		args := controllerArgs(t, objs)
		if got := slices.Contains(args, "--dra-binding-conditions=cxi.slingshot.hpe.com") && slices.Contains(args, "--dra-node-stale=30s"); got != on {
			t.Errorf("bindingConditions %v: controller args %q", on, args)
		}
		if rules := controllerRules(t, objs); slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, writes) }) != on {
			t.Errorf("bindingConditions %v: controller rules %+v", on, rules)
		}
	}
	refusedWithoutController(t, "bindingConditions")
}

// dra.podGroupClaims: the chart publishes the fabric's VNI device (a
// cluster-wide slice, one shareable device) and its DeviceClass, the
// agents serve it, and the controller may read the claims that own the
// VNIs; all of it only with the value on, and only with the controller.
func TestRenderPodGroupClaims(t *testing.T) {
	reads := rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}}
	for _, on := range []bool{false, true} {
		values := withDRA(map[string]any{"podGroupClaims": on})
		objs := renderObjects(t, values)
		ds, _ := agentDaemonSet(t, values)
		if got := slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--dra-podgroup-claims"); got != on {
			t.Errorf("podGroupClaims %v: agent --dra-podgroup-claims %v", on, got)
		}
		o, published := objs["ResourceSlice/cxi.slingshot.hpe.com-fabric"]
		if published != on {
			t.Fatalf("podGroupClaims %v: fabric slice rendered %v", on, published)
		}
		if _, class := deviceClasses(t, values)["vni.cxi.slingshot.hpe.com"]; class != on {
			t.Errorf("podGroupClaims %v: DeviceClass vni.cxi.slingshot.hpe.com rendered %v", on, class)
		}
		if rules := controllerRules(t, objs); slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, reads) }) != on {
			t.Errorf("podGroupClaims %v: controller rules %+v", on, rules)
		}
		if !on {
			continue
		}
		var slice resourcev1.ResourceSlice
		decode(t, o, &slice)
		s := slice.Spec
		if s.Driver != "cxi.slingshot.hpe.com" || s.AllNodes == nil || !*s.AllNodes || s.Pool.Name != draclaim.FabricPool ||
			len(s.Devices) != 1 || s.Devices[0].Name != draclaim.VNIDevice || s.Devices[0].AllowMultipleAllocations == nil || !*s.Devices[0].AllowMultipleAllocations ||
			s.Devices[0].Attributes["type"].StringValue == nil || *s.Devices[0].Attributes["type"].StringValue != draclaim.TypeVNI {
			t.Errorf("fabric slice %+v: want the driver's pool %q on all nodes, one shareable device %q of type %q", s, draclaim.FabricPool, draclaim.VNIDevice, draclaim.TypeVNI)
		}
	}
	for _, conditions := range []bool{false, true} {
		objs := renderObjects(t, withDRA(map[string]any{"podGroupClaims": true, "bindingConditions": conditions}))
		if got := slices.Contains(controllerArgs(t, objs), "--dra-podgroup-claims"); got != conditions {
			t.Errorf("podGroupClaims with bindingConditions %v: controller --dra-podgroup-claims %v", conditions, got)
		}
	}
	refusedWithoutController(t, "podGroupClaims")
}

// controllerArgs are the controller container's arguments in a render.
func controllerArgs(t *testing.T, objs map[string]*Object) []string {
	t.Helper()
	var d appsv1.Deployment
	decode(t, objs["Deployment/slingshot-controller"], &d)
	return d.Spec.Template.Spec.Containers[0].Args
}

// controllerRules are the rules of the controller's ClusterRole in a
// render.
func controllerRules(t *testing.T, objs map[string]*Object) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	decode(t, objs["ClusterRole/slingshot-controller"], &role)
	return role.Rules
}

// refusedWithoutController checks that the chart refuses the DRA value
// on without the controller, which it needs, and says so.
func refusedWithoutController(t *testing.T, value string) {
	t.Helper()
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Render(ch, map[string]any{"api": "dra", "dra": map[string]any{value: true}, "controller": map[string]any{"enabled": false}})
	if want := "dra." + value + " needs controller.enabled"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s without the controller: err %v, want one saying %q", value, err, want)
	}
}

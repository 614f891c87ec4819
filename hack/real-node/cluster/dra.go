package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/slingshot-k8s/slingshot/hack/real-node/install"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

// The agent's front ends (Options.API): the device plugin, or DRA.
//
// Kubernetes 1.37 needs no feature gate for what the DRA tests use:
// resource.k8s.io/v1 and DynamicResourceAllocation are GA and locked on,
// and so are DRAExtendedResource (GA, locked) and DRADeviceTaints (GA, on
// by default) (k8s.io/kubernetes v1.37.1 pkg/features/kube_features.go).
const (
	APIDevicePlugin = "deviceplugin"
	APIDRA          = "dra"
)

// The agent's DRA contract.
const (
	// DRADriver is the agent's DRA driver (--dra-driver-name): the
	// ResourceSlices' and the opaque configs' driver.
	DRADriver = "cxi.slingshot.hpe.com"
	// NICDeviceClass and GPUDeviceClass are the DeviceClasses of the
	// driver's NICs and GPUs (the chart's dra.deviceClasses).
	NICDeviceClass = "cxi.slingshot.hpe.com"
	GPUDeviceClass = "gpu.cxi.slingshot.hpe.com"
	// ClaimConfigAPIVersion and ClaimConfigKind name the opaque claim
	// configuration's parameters.
	ClaimConfigAPIVersion = "slingshot.hpe.com/v1alpha1"
	ClaimConfigKind       = "CXIClaimConfig"
	// SimStateMount is where WithServiceCheck mounts the simulated
	// driver's state into a workload pod.
	SimStateMount = "/sim-state"
)

// draChartValues returns the path of the map of the chart's values that
// holds its DRA values ("api" and the "dra" block), and false when the
// chart has none yet. Until the chart has them, [draOverlay] makes the
// agent's DaemonSet and the objects DRA needs from the device-plugin
// chart.
func draChartValues(defaults map[string]any) (path []string, ok bool) {
	if _, ok := defaults["dra"].(map[string]any); ok {
		return nil, true
	}
	if agent, ok := defaults["agent"].(map[string]any); ok {
		if _, ok := agent["dra"].(map[string]any); ok {
			return []string{"agent"}, true
		}
	}
	return nil, false
}

// setAPIValues puts the API mode into the chart values v: the chart's
// own "api" and "dra" values when it has them, else nothing (the
// post-renderer does it). Called by values: the one place that switches
// between the two.
func (e *Env) setAPIValues(v map[string]any) {
	if e.opts.API == APIDRA {
		// The agent calls the API server (ResourceSlices, claims) from
		// the host network, and no Service proxy runs here: the API
		// server at the node's address, as for the controller.
		agent := v["agent"].(map[string]any)
		agent["extraEnv"] = append(toSlice(agent["extraEnv"]),
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": e.Node.IP},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(node.APIServerPort)})
	}
	if !e.chartDRA {
		return
	}
	dst := v
	for _, k := range e.draValues {
		dst = dst[k].(map[string]any)
	}
	dst["api"] = e.opts.API
	if e.opts.API == APIDRA {
		dst["dra"] = map[string]any{
			"driverName": DRADriver, "nriSocket": e.Node.NRISocket, "deviceClasses": true,
		}
	}
}

func toSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// draOverlay is the Helm post-renderer of a DRA install with a chart that
// has no DRA values yet: it gives the agent's DaemonSet what the agent's
// DRA contract asks (--api=dra, its driver name, the NRI socket, the
// kubelet's plugin directories, an API token), and adds the ClusterRole
// and the DeviceClasses the chart's DRA mode makes.
type draOverlay struct{ e *Env }

var yamlDocSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Run implements postrender.PostRenderer.
func (o draOverlay) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	var out bytes.Buffer
	patched := false
	for _, doc := range yamlDocSep.Split(in.String(), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("dra overlay: %w", err)
		}
		if meta.Kind == "DaemonSet" && meta.Name == ReleaseName+"-agent" {
			b, err := o.patchAgent([]byte(doc))
			if err != nil {
				return nil, err
			}
			doc, patched = string(b), true
		}
		out.WriteString("---\n")
		out.WriteString(strings.TrimLeft(doc, "\n"))
		if !strings.HasSuffix(doc, "\n") {
			out.WriteString("\n")
		}
	}
	if !patched {
		return nil, fmt.Errorf("dra overlay: no DaemonSet %s-agent in the chart's manifests", ReleaseName)
	}
	for _, obj := range o.objects() {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return &out, nil
}

func (o draOverlay) patchAgent(doc []byte) ([]byte, error) {
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(doc, &ds); err != nil {
		return nil, fmt.Errorf("dra overlay: agent DaemonSet: %w", err)
	}
	n := o.e.Node
	spec := &ds.Spec.Template.Spec
	// The agent publishes ResourceSlices and reads claims with its
	// ServiceAccount.
	spec.AutomountServiceAccountToken = ptr.To(true)
	var c *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "agent" {
			c = &spec.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("dra overlay: agent DaemonSet has no container \"agent\"")
	}
	c.Args = append(c.Args, "--api="+APIDRA, "--dra-driver-name="+DRADriver, "--nri-socket="+n.NRISocket)
	for _, m := range []struct {
		name, path string
		typ        corev1.HostPathType
	}{
		// The kubelet's plugin registration directory, and the
		// driver's own, for its two sockets.
		{"dra-registry", filepath.Join(n.KubeletDir, "plugins_registry"), corev1.HostPathDirectoryOrCreate},
		{"dra-plugin", filepath.Join(n.KubeletDir, "plugins", DRADriver), corev1.HostPathDirectoryOrCreate},
		// containerd's NRI socket, alone in its directory.
		{"nri", filepath.Dir(n.NRISocket), corev1.HostPathDirectory},
	} {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: m.path})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: m.name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.path, Type: ptr.To(m.typ)},
		}})
	}
	return yaml.Marshal(&ds)
}

// objects are what the chart's DRA mode adds: the agent's ClusterRole and
// its binding, and the DeviceClasses.
func (o draOverlay) objects() []runtime.Object {
	name := ReleaseName + "-agent-dra"
	class := func(name, typ string) *resourcev1.DeviceClass {
		expr := fmt.Sprintf(`device.driver == %q && "type" in device.attributes[%q] && device.attributes[%q].type == %q`, DRADriver, DRADriver, DRADriver, typ)
		return &resourcev1.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}},
		}
	}
	return []runtime.Object{
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"get", "update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: ReleaseName + "-agent", Namespace: Namespace}},
		},
		class(NICDeviceClass, "nic"),
		class(GPUDeviceClass, "gpu"),
	}
}

// ResourceSlices lists the driver's ResourceSlices of the node.
func (e *Env) ResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error) {
	list, err := e.Node.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + e.Node.Name + "," + resourcev1.ResourceSliceSelectorDriver + "=" + DRADriver,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// WaitResourceSlices waits until the driver's ResourceSlices of the node
// list want devices, and returns them.
func (e *Env) WaitResourceSlices(ctx context.Context, want int) ([]resourcev1.ResourceSlice, error) {
	var slices []resourcev1.ResourceSlice
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if slices, err = e.ResourceSlices(ctx); err != nil {
			last = err.Error()
			return false, nil
		}
		n := 0
		for _, s := range slices {
			n += len(s.Spec.Devices)
		}
		last = fmt.Sprintf("%d slices, %d devices", len(slices), n)
		return n == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ResourceSlices of driver %s on %s with %d devices: %w (last: %s)\n%s", DRADriver, e.Node.Name, want, err, last, e.Describe(ctx))
	}
	return slices, nil
}

// PhysicalNICs counts the mock machine's physical functions, the devices
// the driver publishes.
func (e *Env) PhysicalNICs() int {
	n := 0
	for _, nic := range e.Machine.NICs {
		if !nic.VF {
			n++
		}
	}
	return n
}

// ClaimConfig is the opaque configuration of the driver's claims.
type ClaimConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// VNI is "job", "pod", "none" or "claim:NAME".
	VNI       string `json:"vni,omitempty"`
	EnvSuffix string `json:"envSuffix,omitempty"`
}

// NICClaimTemplate is a ResourceClaimTemplate of nics NICs of
// NICDeviceClass, with the opaque configuration vni ("" for none).
func NICClaimTemplate(name string, nics int, vni string) *resourcev1.ResourceClaimTemplate {
	t := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: NICDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(nics),
			}}},
		}}},
	}
	if vni != "" {
		raw, _ := json.Marshal(ClaimConfig{APIVersion: ClaimConfigAPIVersion, Kind: ClaimConfigKind, VNI: vni})
		t.Spec.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
			Requests:            []string{"nic"},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: DRADriver, Parameters: runtime.RawExtension{Raw: raw}}},
		}}
	}
	return t
}

// ClaimName is the name of the claim a DRA workload pod's container uses.
const ClaimName = "cxi"

// WithClaimTemplate makes the pod's containers use one claim made from
// the ResourceClaimTemplate template.
func WithClaimTemplate(spec *corev1.PodSpec, template string) {
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: ClaimName, ResourceClaimTemplateName: ptr.To(template)})
	for i := range spec.Containers {
		spec.Containers[i].Resources.Claims = append(spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: ClaimName})
	}
}

// ClaimJob is Job(name, pods, 0) whose pods each have one claim made
// from template.
func ClaimJob(name string, pods int, template string) *batchv1.Job {
	j := Job(name, pods, 0)
	WithClaimTemplate(&j.Spec.Template.Spec, template)
	return j
}

// WithServiceCheck mounts the simulated driver's state read-only into the
// pod's workload containers and has them print their services when they
// start (the workload's svccheck lines).
func (e *Env) WithServiceCheck(spec *corev1.PodSpec) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "sim-state", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: e.SimStateDir, Type: ptr.To(corev1.HostPathDirectory)},
	}})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "sim-state", MountPath: SimStateMount, ReadOnly: true})
		c.Env = append(c.Env, corev1.EnvVar{Name: "SIM_STATE_DIR", Value: SimStateMount})
	}
}

// PodClaims returns the ResourceClaims of the pod's claim statuses, by
// claim name in the pod.
func (e *Env) PodClaims(ctx context.Context, p *corev1.Pod) (map[string]*resourcev1.ResourceClaim, error) {
	out := map[string]*resourcev1.ResourceClaim{}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := e.Node.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("claim %s of pod %s/%s: %w", *st.ResourceClaimName, p.Namespace, p.Name, err)
		}
		out[st.Name] = c
	}
	return out, nil
}

// describeClaims lists every ResourceClaim with its allocation and
// reservations, for Describe.
func (e *Env) describeClaims(ctx context.Context, b *strings.Builder) {
	list, err := e.Node.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	b.WriteString("resource claims:\n")
	for _, c := range list.Items {
		var devs []string
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				devs = append(devs, r.Pool+"/"+r.Device)
			}
		}
		var users []string
		for _, r := range c.Status.ReservedFor {
			users = append(users, r.Resource+"/"+r.Name)
		}
		fmt.Fprintf(b, "  %s/%s allocated=%v devices=%v reservedFor=%v deleting=%v\n", c.Namespace, c.Name, c.Status.Allocation != nil, devs, users, c.DeletionTimestamp != nil)
	}
}

// draRelease gives the release the post-renderer when the chart has no
// DRA values yet.
func (e *Env) draRelease(r *install.Release) {
	if e.opts.API == APIDRA && !e.chartDRA {
		r.PostRenderer = draOverlay{e: e}
	}
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

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
	// NICDeviceClass is the DeviceClass of the driver's NICs (the
	// chart's dra.deviceClasses).
	NICDeviceClass = "cxi.slingshot.hpe.com"
	// VNIDeviceClass is the DeviceClass of the fabric's VNI device, which
	// a PodGroup's claim asks for (the chart's dra.podGroupClaims).
	VNIDeviceClass = "vni.cxi.slingshot.hpe.com"
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
// chart has none (a chart older than the agent's DRA front end: Setup
// refuses DRA mode then).
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
// "api" value and, for DRA, its "dra" block.
func (e *Env) setAPIValues(v map[string]any) {
	// The agent calls the API server (events, its node's taint; with DRA
	// ResourceSlices and claims) from the host network, and no Service
	// proxy runs here: the API server at the node's address, as for the
	// controller.
	agent := v["agent"].(map[string]any)
	agent["extraEnv"] = append(toSlice(agent["extraEnv"]),
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": e.Node.APIServerHost()},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(node.APIServerPort)})
	if !e.chartDRA {
		return
	}
	dst := v
	for _, k := range e.draValues {
		dst = dst[k].(map[string]any)
	}
	dst["api"] = e.opts.API
	// The node's NRI socket, under its root, for either mode that uses it:
	// DRA, and the device plugin with agent.devicePluginNRI.
	dra := map[string]any{"nriSocket": e.Node.NodePath(e.Node.NRISocket)}
	if e.opts.API == APIDRA {
		dra["driverName"], dra["deviceClasses"] = DRADriver, true
	}
	dst["dra"] = dra
}

func toSlice(v any) []any {
	s, _ := v.([]any)
	return s
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
	// ServiceOptions is the per-job request, in the grammar of the pod
	// annotation slingshot.hpe.com/service-options.
	ServiceOptions json.RawMessage `json:"serviceOptions,omitempty"`
}

// NICClaimTemplate is a ResourceClaimTemplate of nics NICs of
// NICDeviceClass, with the opaque configuration vni ("" for none).
func NICClaimTemplate(name string, nics int, vni string) *resourcev1.ResourceClaimTemplate {
	if vni == "" {
		return NICClaimTemplateWith(name, nics, nil)
	}
	return NICClaimTemplateWith(name, nics, &ClaimConfig{VNI: vni})
}

// NICClaimTemplateWith is a ResourceClaimTemplate of nics NICs of
// NICDeviceClass, with the opaque configuration cfg (its APIVersion and
// Kind filled in), none when nil.
func NICClaimTemplateWith(name string, nics int, cfg *ClaimConfig) *resourcev1.ResourceClaimTemplate {
	t := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: NICDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(nics),
			}}},
		}}},
	}
	if cfg != nil {
		c := *cfg
		c.APIVersion, c.Kind = ClaimConfigAPIVersion, ClaimConfigKind
		raw, _ := json.Marshal(c)
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
		HostPath: &corev1.HostPathVolumeSource{Path: e.Node.NodePath(e.SimStateDir), Type: ptr.To(corev1.HostPathDirectory)},
	}})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "sim-state", MountPath: SimStateMount, ReadOnly: true})
		c.Env = append(c.Env, corev1.EnvVar{Name: "SIM_STATE_DIR", Value: SimStateMount})
	}
}

// PodClaims returns the ResourceClaims the pod's status names, by claim
// name in the pod; the claim the scheduler made for the pod's extended
// resources (a DeviceClass's extendedResourceName) is under "".
func (e *Env) PodClaims(ctx context.Context, p *corev1.Pod) (map[string]*resourcev1.ResourceClaim, error) {
	names := map[string]string{}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			names[st.Name] = *st.ResourceClaimName
		}
	}
	if st := p.Status.ExtendedResourceClaimStatus; st != nil {
		names[""] = st.ResourceClaimName
	}
	out := map[string]*resourcev1.ResourceClaim{}
	for name, claim := range names {
		c, err := e.Node.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("claim %s of pod %s/%s: %w", claim, p.Namespace, p.Name, err)
		}
		out[name] = c
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

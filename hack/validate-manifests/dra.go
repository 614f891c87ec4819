package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// DRA is what the chart's DRA render offers claims: its driver's name and
// its DeviceClasses.
type DRA struct {
	Driver  string
	Classes map[string]bool
}

// ownsClass reports whether a DeviceClass name is in the driver's domain:
// the driver's own name or a subdomain of it. Only such a class must be
// one the chart makes; the others are other drivers' (a GPU vendor's).
func (d DRA) ownsClass(name string) bool {
	return name == d.Driver || strings.HasSuffix(name, "."+d.Driver)
}

// draVariant is the variant of Variants that serves the NICs through DRA;
// draAllVariant has every DRA option on, so its render makes every
// DeviceClass the chart can make (the fabric's VNI class comes with
// dra.podGroupClaims).
const (
	draVariant    = "dra"
	draAllVariant = "dra-all-features"
)

// ChartDRA renders the chart's DRA variant with every option and returns
// its driver (from the agent's --dra-driver-name) and DeviceClasses.
func ChartDRA(ch *chart.Chart) (DRA, error) {
	v, ok := VariantNamed(draAllVariant)
	if !ok {
		return DRA{}, fmt.Errorf("no variant %q", draAllVariant)
	}
	rendered, err := Render(ch, v.Values, v.APIVersions...)
	if err != nil {
		return DRA{}, fmt.Errorf("%s: %w", draAllVariant, err)
	}
	dra := DRA{Classes: map[string]bool{}}
	for _, m := range rendered {
		o, err := Decode([]byte(m.Content))
		if err != nil || o == nil {
			continue
		}
		switch {
		case o.GVK.Group == "resource.k8s.io" && o.GVK.Kind == "DeviceClass":
			dra.Classes[o.Name] = true
		case o.GVK.Kind == "DaemonSet":
			var errs []error
			if pod := podSpecOf(o, &errs); pod != nil {
				for _, c := range pod.Containers {
					for _, a := range c.Args {
						if d, ok := strings.CutPrefix(a, "--dra-driver-name="); ok {
							dra.Driver = d
						}
					}
				}
			}
		}
	}
	if dra.Driver == "" || len(dra.Classes) == 0 {
		return DRA{}, fmt.Errorf("%s: no agent with --dra-driver-name, or no DeviceClass", draAllVariant)
	}
	return dra, nil
}

// CheckDRA checks the DRA objects of one file or render where the
// schemas cannot, as the API server does on create, and against the
// chart's DRA render (dra):
//
//   - the CEL selectors of DeviceClasses and of claims' requests compile
//     in the API server's DRA environment;
//   - a ResourceClaim's or ResourceClaimTemplate's configs and constraints
//     name only its own requests; every request for a class in the
//     driver's domain (dra.Driver or a name ending in "."+dra.Driver)
//     names one of dra.Classes, and every opaque config is for dra.Driver
//     (the parameters themselves are the agent's to parse; they are not
//     read here). A class outside that domain, such as gpu.nvidia.com, is
//     another driver's, which the chart neither makes nor knows: it is
//     not checked;
//   - every claim a pod's containers name is one of its resourceClaims,
//     and every ResourceClaim or ResourceClaimTemplate a pod names is in
//     objs (an example is self-contained).
func CheckDRA(objs []*Object, dra DRA) []error {
	var errs []error
	have := map[string]bool{}
	for _, o := range objs {
		if o.GVK.Group == "resource.k8s.io" {
			have[o.GVK.Kind+"/"+o.Namespace+"/"+o.Name] = true
		}
	}
	for _, o := range objs {
		var spec *resourcev1.ResourceClaimSpec
		switch {
		case o.GVK.Group == "resource.k8s.io" && o.GVK.Kind == "DeviceClass":
			var c resourcev1.DeviceClass
			if decodeInto(o, &c, &errs) {
				errs = append(errs, checkSelectors(o, "spec.selectors", c.Spec.Selectors)...)
			}
			continue
		case o.GVK.Group == "resource.k8s.io" && o.GVK.Kind == "ResourceClaim":
			var c resourcev1.ResourceClaim
			if decodeInto(o, &c, &errs) {
				spec = &c.Spec
			}
		case o.GVK.Group == "resource.k8s.io" && o.GVK.Kind == "ResourceClaimTemplate":
			var c resourcev1.ResourceClaimTemplate
			if decodeInto(o, &c, &errs) {
				spec = &c.Spec.Spec
			}
		default:
			if pod := podSpecOf(o, &errs); pod != nil {
				errs = append(errs, checkPodClaims(o, pod, have)...)
			}
			continue
		}
		if spec != nil {
			errs = append(errs, checkClaimSpec(o, spec, dra)...)
		}
	}
	return errs
}

// podSpecOf returns the pod spec of a Pod or of a workload's pod
// template, nil for other kinds.
func podSpecOf(o *Object, errs *[]error) *corev1.PodSpec {
	var tmpl struct {
		Spec struct {
			Template    *corev1.PodTemplateSpec `json:"template"`
			JobTemplate *struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			} `json:"jobTemplate"`
		} `json:"spec"`
	}
	switch {
	case o.GVK.Group == "" && o.GVK.Kind == "Pod":
		var p corev1.Pod
		if decodeInto(o, &p, errs) {
			return &p.Spec
		}
	case o.GVK.Group == "batch" && o.GVK.Kind == "CronJob":
		if decodeInto(o, &tmpl, errs) && tmpl.Spec.JobTemplate != nil {
			return &tmpl.Spec.JobTemplate.Spec.Template.Spec
		}
	case o.GVK.Group == "batch" && o.GVK.Kind == "Job", o.GVK.Group == "apps":
		if decodeInto(o, &tmpl, errs) && tmpl.Spec.Template != nil {
			return &tmpl.Spec.Template.Spec
		}
	}
	return nil
}

func checkPodClaims(o *Object, pod *corev1.PodSpec, have map[string]bool) []error {
	var errs []error
	claims := map[string]bool{}
	for _, c := range pod.ResourceClaims {
		claims[c.Name] = true
		switch {
		case c.ResourceClaimName != nil:
			if !have["ResourceClaim/"+o.Namespace+"/"+*c.ResourceClaimName] {
				errs = append(errs, fmt.Errorf("%s: resourceClaims %s names ResourceClaim %s, which the file does not make", o, c.Name, *c.ResourceClaimName))
			}
		case c.ResourceClaimTemplateName != nil:
			if !have["ResourceClaimTemplate/"+o.Namespace+"/"+*c.ResourceClaimTemplateName] {
				errs = append(errs, fmt.Errorf("%s: resourceClaims %s names ResourceClaimTemplate %s, which the file does not make", o, c.Name, *c.ResourceClaimTemplateName))
			}
		}
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		for _, rc := range c.Resources.Claims {
			if !claims[rc.Name] {
				errs = append(errs, fmt.Errorf("%s: container %s uses claim %q, which is not among the pod's resourceClaims", o, c.Name, rc.Name))
			}
		}
	}
	return errs
}

func checkClaimSpec(o *Object, spec *resourcev1.ResourceClaimSpec, dra DRA) []error {
	var errs []error
	// Names a config or constraint may use: "req" and "req/sub".
	names := map[string]bool{}
	class := func(path, name string) {
		if dra.ownsClass(name) && !dra.Classes[name] {
			errs = append(errs, fmt.Errorf("%s: %s: DeviceClass %q is not one of the chart's (%s)", o, path, name, strings.Join(slices.Sorted(maps.Keys(dra.Classes)), ", ")))
		}
	}
	for i, r := range spec.Devices.Requests {
		names[r.Name] = true
		path := fmt.Sprintf("spec.devices.requests[%d]", i)
		if r.Exactly != nil {
			class(path+".exactly.deviceClassName", r.Exactly.DeviceClassName)
			errs = append(errs, checkSelectors(o, path+".exactly.selectors", r.Exactly.Selectors)...)
		}
		for j, s := range r.FirstAvailable {
			names[r.Name+"/"+s.Name] = true
			sp := fmt.Sprintf("%s.firstAvailable[%d]", path, j)
			class(sp+".deviceClassName", s.DeviceClassName)
			errs = append(errs, checkSelectors(o, sp+".selectors", s.Selectors)...)
		}
	}
	refs := func(path string, requests []string) {
		for _, r := range requests {
			if !names[r] {
				errs = append(errs, fmt.Errorf("%s: %s names request %q, which the claim does not make", o, path, r))
			}
		}
	}
	for i, c := range spec.Devices.Constraints {
		refs(fmt.Sprintf("spec.devices.constraints[%d].requests", i), c.Requests)
	}
	for i, c := range spec.Devices.Config {
		path := fmt.Sprintf("spec.devices.config[%d]", i)
		refs(path+".requests", c.Requests)
		if c.Opaque != nil && c.Opaque.Driver != dra.Driver {
			errs = append(errs, fmt.Errorf("%s: %s.opaque.driver %q is not the chart's driver %q", o, path, c.Opaque.Driver, dra.Driver))
		}
	}
	return errs
}

// checkSelectors compiles CEL selectors as the API server does on create.
func checkSelectors(o *Object, path string, selectors []resourcev1.DeviceSelector) []error {
	var errs []error
	for i, s := range selectors {
		if s.CEL == nil {
			continue
		}
		res := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(s.CEL.Expression, dracel.Options{})
		if res.Error != nil {
			errs = append(errs, fmt.Errorf("%s: %s[%d].cel.expression: %v", o, path, i, res.Error))
		}
	}
	return errs
}

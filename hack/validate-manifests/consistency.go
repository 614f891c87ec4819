package main

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// workload is a pod template with its selector.
type workload struct {
	name     string
	selector *metav1.LabelSelector
	template corev1.PodTemplateSpec
}

// Consistency checks the objects of one release against each other, where
// schema validation cannot see a mistake: a workload's selector must
// select its own template (the API server refuses it otherwise); a
// Service must select some workload and name ports its pods have; probes
// must name ports of their container; a pod's ServiceAccount and
// ConfigMaps, and a binding's role and ServiceAccounts, must be in the set
// (unless named in external, as "Kind/name"). A cert-manager Certificate
// makes the Secret it names, and a CA Issuer needs its Secret.
func Consistency(objs []*Object, external map[string]bool) []error {
	var errs []error
	have := map[string]bool{}
	for _, o := range objs {
		have[o.GVK.Kind+"/"+o.Name] = true
		if o.GVK.Group == "cert-manager.io" && o.GVK.Kind == "Certificate" {
			var c struct {
				Spec struct{ SecretName string } `json:"spec"`
			}
			if decodeInto(o, &c, &errs) {
				have["Secret/"+c.Spec.SecretName] = true
			}
		}
	}
	need := func(from *Object, ref string) {
		if !have[ref] && !external[ref] {
			errs = append(errs, fmt.Errorf("%s refers to %s, which the release does not make", from, ref))
		}
	}
	var workloads []workload
	for _, o := range objs {
		var w *workload
		switch o.GVK.Kind {
		case "DaemonSet":
			var d appsv1.DaemonSet
			if decodeInto(o, &d, &errs) {
				w = &workload{o.String(), d.Spec.Selector, d.Spec.Template}
			}
		case "Deployment":
			var d appsv1.Deployment
			if decodeInto(o, &d, &errs) {
				w = &workload{o.String(), d.Spec.Selector, d.Spec.Template}
			}
		case "StatefulSet":
			var d appsv1.StatefulSet
			if decodeInto(o, &d, &errs) {
				w = &workload{o.String(), d.Spec.Selector, d.Spec.Template}
			}
		}
		if w == nil {
			continue
		}
		workloads = append(workloads, *w)
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
			errs = append(errs, fmt.Errorf("%s: selector %v does not select its pod template's labels %v", o, w.selector, w.template.Labels))
		}
		spec := w.template.Spec
		if spec.ServiceAccountName != "" {
			need(o, "ServiceAccount/"+spec.ServiceAccountName)
		}
		for _, v := range spec.Volumes {
			switch {
			case v.ConfigMap != nil:
				need(o, "ConfigMap/"+v.ConfigMap.Name)
			case v.PersistentVolumeClaim != nil:
				need(o, "PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName)
			case v.Secret != nil:
				need(o, "Secret/"+v.Secret.SecretName)
			}
		}
		for _, c := range spec.Containers {
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "" && !ports[p.HTTPGet.Port.StrVal] {
					errs = append(errs, fmt.Errorf("%s: container %s probes port %q, which it does not declare", o, c.Name, p.HTTPGet.Port.StrVal))
				}
			}
		}
	}
	for _, o := range objs {
		switch o.GVK.Kind {
		case "Issuer", "ClusterIssuer":
			var i struct {
				Spec struct {
					CA *struct{ SecretName string } `json:"ca"`
				} `json:"spec"`
			}
			if o.GVK.Group == "cert-manager.io" && decodeInto(o, &i, &errs) && i.Spec.CA != nil {
				need(o, "Secret/"+i.Spec.CA.SecretName)
			}
		case "Service":
			var s corev1.Service
			if !decodeInto(o, &s, &errs) || len(s.Spec.Selector) == 0 {
				continue
			}
			var selected []workload
			for _, w := range workloads {
				if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
					selected = append(selected, w)
				}
			}
			if len(selected) == 0 {
				errs = append(errs, fmt.Errorf("%s selects no pod of the release", o))
			}
			for _, p := range s.Spec.Ports {
				if p.TargetPort.StrVal == "" {
					continue
				}
				for _, w := range selected {
					if !declaresPort(w.template.Spec, p.TargetPort.StrVal) {
						errs = append(errs, fmt.Errorf("%s: target port %q is not a port of %s", o, p.TargetPort.StrVal, w.name))
					}
				}
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding // ClusterRoleBinding has the same shape
			if !decodeInto(o, &b, &errs) {
				continue
			}
			need(o, b.RoleRef.Kind+"/"+b.RoleRef.Name)
			for _, s := range b.Subjects {
				if s.Kind == "ServiceAccount" {
					need(o, "ServiceAccount/"+s.Name)
				}
			}
		}
	}
	return errs
}

func declaresPort(spec corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func decodeInto(o *Object, into any, errs *[]error) bool {
	if err := json.Unmarshal(o.JSON, into); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", o, err))
		return false
	}
	return true
}

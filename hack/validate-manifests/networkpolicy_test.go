package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// renderNetworkPolicy renders the chart with values and returns its
// NetworkPolicies.
func renderNetworkPolicy(t *testing.T, values map[string]any) []networkingv1.NetworkPolicy {
	t.Helper()
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	var out []networkingv1.NetworkPolicy
	for _, m := range rendered {
		o, err := Decode([]byte(m.Content))
		if err != nil {
			t.Fatalf("%s: %v", m.Source, err)
		}
		if o == nil || o.GVK.Kind != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		if err := json.Unmarshal(o.JSON, &np); err != nil {
			t.Fatal(err)
		}
		out = append(out, np)
	}
	return out
}

// hooksSources returns the namespaces admitted to the hooks port, and
// whether any rule admits it from everywhere.
func hooksSources(np networkingv1.NetworkPolicy) (namespaces []string, open bool) {
	for _, rule := range np.Spec.Ingress {
		if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port == nil || *p.Port == intstr.FromString("hooks")
		}) && len(rule.Ports) > 0 {
			continue
		}
		if len(rule.From) == 0 {
			open = true
		}
		for _, peer := range rule.From {
			if peer.NamespaceSelector == nil || peer.PodSelector != nil || peer.IPBlock != nil {
				open = true
				continue
			}
			namespaces = append(namespaces, peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
		}
	}
	return namespaces, open
}

// TestItem7NetworkPolicyAdmitsOnlyMetacontroller (issue 15, item 7): the
// chart ships, on by default, a NetworkPolicy that admits only
// Metacontroller's namespace (a value names it) to the hooks port, and
// nobody when the chart installs no DecoratorController; the gRPC and
// metrics ports stay open. Before, the policy was off by default.
func TestItem7NetworkPolicyAdmitsOnlyMetacontroller(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
	}{
		"defaults (no DecoratorController)": {nil, nil},
		"metacontroller":                    {map[string]any{"metacontroller": map[string]any{"enabled": true}}, []string{"metacontroller"}},
		"metacontroller elsewhere": {map[string]any{"metacontroller": map[string]any{"enabled": true},
			"networkPolicy": map[string]any{"metacontrollerNamespace": "mc-system"}}, []string{"mc-system"}},
	} {
		t.Run(name, func(t *testing.T) {
			nps := renderNetworkPolicy(t, tc.values)
			if len(nps) != 1 {
				t.Fatalf("%d NetworkPolicies, want the controller's", len(nps))
			}
			np := nps[0]
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "controller" {
				t.Fatalf("policy %+v does not restrict the controller's ingress", np.Spec)
			}
			got, open := hooksSources(np)
			if open || !slices.Equal(got, tc.want) {
				t.Errorf("hooks port admits namespaces %v (open to all: %v), want %v only", got, open, tc.want)
			}
			for _, port := range []string{"grpc", "metrics"} {
				if !slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
					return len(r.From) == 0 && slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
						return p.Port != nil && *p.Port == intstr.FromString(port)
					})
				}) {
					t.Errorf("port %s is not open to all", port)
				}
			}
		})
	}
	if nps := renderNetworkPolicy(t, map[string]any{"networkPolicy": map[string]any{"enabled": false}}); len(nps) != 0 {
		t.Errorf("networkPolicy.enabled=false still makes %d", len(nps))
	}
}

// TestItem7HookParentsMustBeOwnerKinds: the hooks confirm each parent with
// the API server by its kind, which the controller can look up only for
// its owner kinds (and VNIClaims), so the chart refuses a DecoratorController
// over another kind.
func TestItem7HookParentsMustBeOwnerKinds(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Render(ch, map[string]any{"metacontroller": map[string]any{"enabled": true,
		"resources": []any{map[string]any{"apiVersion": "batch/v1", "resource": "jobs"}, map[string]any{"apiVersion": "apps/v1", "resource": "daemonsets"}}}})
	if err == nil || !strings.Contains(err.Error(), "apps/v1 daemonsets is not among controller.ownerKinds") {
		t.Errorf("err %v; want the DaemonSet parent refused", err)
	}
}

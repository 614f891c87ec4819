package main

import (
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// Release names the plain manifests are rendered for.
const (
	releaseName      = "slingshot"
	releaseNamespace = "slingshot"
	kubeVersion      = "v1.37.1"
)

// CertManagerAPI is cert-manager's API version. The chart takes the
// controller's certificate from cert-manager where the cluster serves it,
// and the plain manifests are rendered as for such a cluster: without it
// the chart makes a CA with a fresh private key at every render, which
// must never be written into a file of the repository.
const CertManagerAPI = "cert-manager.io/v1"

// Variant is one set of values the chart is rendered and validated with.
type Variant struct {
	Name   string
	Values map[string]any
	// APIVersions are the API versions the cluster serves beyond the
	// built-in ones (.Capabilities.APIVersions).
	APIVersions []string
	// External are objects the values name that the cluster must already
	// have, as "Kind/name".
	External []string
}

// Variants are the value sets CI renders: the defaults on a cluster with
// cert-manager (also the plain manifests), every optional feature on, the
// controller on the Kubernetes store with three elected replicas (with
// cert-manager), the embedded controller, the simulated driver without
// privileges (nor IPAM socket or CNI plugin) on a cluster without
// cert-manager (the chart makes its own CA), plaintext gRPC, and the NICs
// served through DRA (api "dra"), plain and with every DRA option on.
// Together they take every branch of the templates.
func Variants() []Variant {
	return []Variant{
		{Name: "defaults", Values: map[string]any{}, APIVersions: []string{CertManagerAPI}},
		{Name: "all-features", Values: map[string]any{
			"commonLabels":     map[string]any{"team": "hpc"},
			"imagePullSecrets": []any{map[string]any{"name": "registry"}},
			"agent": map[string]any{
				"cleanManaged":   true,
				"extraArgs":      []any{"--log-level=debug"},
				"extraEnv":       []any{map[string]any{"name": "GODEBUG", "value": "madvdontneed=1"}},
				"nodeSelector":   map[string]any{"hpe.com/slingshot": "true"},
				"affinity":       map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/os", "operator": "In", "values": []any{"linux"}}}}}}}},
				"podAnnotations": map[string]any{"example.com/a": "b"},
				"podLabels":      map[string]any{"tier": "node"},
				"hsnInterface":   map[string]any{"enabled": true, "mode": "ipvlan", "mtu": 9000},
				"config": map[string]any{
					"membership": map[string]any{"criSocket": "/run/containerd/containerd.sock"},
					"limits":     map[string]any{"TXQs": map[string]any{"max": 64, "res": 8}},
				},
			},
			"controller": map[string]any{
				"podVNIRange":    "60000-65535",
				"ipPools":        "hsn0=10.150.0.0/16:/24",
				"tls":            map[string]any{"secretName": "slingshot-controller-tls"},
				"persistence":    map[string]any{"existingClaim": "leases", "storageClassName": "fast"},
				"extraArgs":      []any{"--log-level=debug"},
				"extraEnv":       []any{map[string]any{"name": "GOMAXPROCS", "value": "2"}},
				"nodeSelector":   map[string]any{"node-role.kubernetes.io/control-plane": ""},
				"tolerations":    []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
				"affinity":       map[string]any{"podAntiAffinity": map[string]any{}},
				"podAnnotations": map[string]any{"example.com/a": "b"},
				"podLabels":      map[string]any{"tier": "control"},
				"service":        map[string]any{"annotations": map[string]any{"example.com/a": "b"}},
				"hwcoll": map[string]any{"fmURL": "https://fmn.example:8000", "jobFMURL": "https://fm.hsn.example:8000",
					"oauthSecret": "fm-oauth", "tlsSecret": "fm-client-tls", "caSecret": "fm-ca"},
			},
			"ipam":           map[string]any{"socket": "/var/run/slingshot/ipam.sock", "cniBinDir": "/var/lib/cni/bin/"},
			"metacontroller": map[string]any{"enabled": true},
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"},
				"additionalLabels": map[string]any{"route": "hpc-oncall", "severity": "ignored: the rule's own wins"}},
			"grafanaDashboard": map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "HPC"}},
			"networkPolicy":    map[string]any{"enabled": true},
		}, External: []string{"Secret/slingshot-controller-tls", "PersistentVolumeClaim/leases", "Secret/registry",
			"Secret/fm-oauth", "Secret/fm-client-tls", "Secret/fm-ca"}},
		{Name: "kube-ha", Values: map[string]any{
			"controller": map[string]any{"store": "kube", "replicas": 3},
		}, APIVersions: []string{CertManagerAPI}},
		{Name: "embedded-controller", Values: map[string]any{
			"controller": map[string]any{"enabled": false},
		}},
		{Name: "sim-unprivileged", Values: map[string]any{
			"agent": map[string]any{"cxiDriver": "sim", "privileged": false},
			"ipam":  map[string]any{"socket": "", "installPlugin": false},
			"controller": map[string]any{"persistence": map[string]any{"enabled": false},
				"tls": map[string]any{"ipAddresses": []any{"192.0.2.10"}, "dnsNames": []any{"controller.example"}}},
		}},
		{Name: "plaintext", Values: map[string]any{
			"controller": map[string]any{"tls": map[string]any{"enabled": false}},
		}},
		{Name: "dra", Values: map[string]any{"api": "dra"}, APIVersions: []string{CertManagerAPI}},
		{Name: "dra-all-features", Values: map[string]any{"api": "dra",
			"dra": map[string]any{"bindingConditions": true, "podGroupClaims": true}}, APIVersions: []string{CertManagerAPI}},
	}
}

// VariantNamed returns the variant of Variants called name, and whether
// there is one.
func VariantNamed(name string) (Variant, bool) {
	for _, v := range Variants() {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// Rendered is one rendered manifest: a template's output document.
type Rendered struct {
	Source  string // template path within the chart
	Content string
}

// LoadChart loads the chart directory with Helm's loader and checks that
// its kubeVersion constraint admits the project's Kubernetes release.
func LoadChart(dir string) (*chart.Chart, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	if err := ch.Validate(); err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kubeVersion) {
		return nil, fmt.Errorf("chart kubeVersion %q does not admit %s", c, kubeVersion)
	}
	return ch, nil
}

// Render renders ch with values over its defaults, as `helm install
// --dry-run` would for a release slingshot in namespace slingshot on
// Kubernetes kubeVersion serving also apiVersions, and returns the
// manifests in Helm's install order. Missing values are errors (strict
// mode).
func Render(ch *chart.Chart, values map[string]any, apiVersions ...string) ([]Rendered, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: kubeVersion, Major: "1", Minor: "37"}
	caps.APIVersions = append(slices.Clone(caps.APIVersions), apiVersions...)
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sort manifests: %w", err)
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("the chart has %d hooks; the plain manifests cannot carry them", len(hooks))
	}
	out := make([]Rendered, 0, len(manifests))
	for _, m := range manifests {
		out = append(out, Rendered{Source: m.Name, Content: strings.TrimSpace(m.Content)})
	}
	return out, nil
}

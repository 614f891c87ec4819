package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var (
	loadOnce  sync.Once
	loaded    *Validator
	loadError error
)

// testValidator returns a validator with the Kubernetes schemas and every
// CRD the tool knows, loaded once for all tests.
func testValidator(t *testing.T) *Validator {
	t.Helper()
	loadOnce.Do(func() {
		dir, err := openAPISpecDir()
		if err != nil {
			loadError = err
			return
		}
		b, err := LoadBuiltinSchemas(dir)
		if err != nil {
			loadError = err
			return
		}
		v, err := NewValidator(b, NewCRDs())
		if err != nil {
			loadError = err
			return
		}
		paths, _ := filepath.Glob("../../deploy/crds/*.yaml")
		own, _ := filepath.Glob("schemas/*.yaml")
		paths = append(paths, own...)
		for _, u := range upstreamCRDs {
			dir, err := moduleDir(u.module)
			if err != nil {
				loadError = err
				return
			}
			paths = append(paths, filepath.Join(dir, u.file))
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				loadError = err
				return
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(data, &crd); err != nil {
				loadError = err
				return
			}
			if errs := v.CRDs.Add(context.Background(), &crd); len(errs) > 0 {
				loadError = errors.Join(errs...)
				return
			}
		}
		loaded = v
	})
	if loadError != nil {
		t.Fatal(loadError)
	}
	return loaded
}

// check returns every problem the tool reports for one document.
func check(t *testing.T, v *Validator, doc []byte) []error {
	t.Helper()
	o, err := Decode(doc)
	if err != nil {
		return []error{err}
	}
	if o == nil {
		t.Fatal("empty document")
	}
	var errs []error
	if o.GVK.Kind == "CustomResourceDefinition" {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			return []error{err}
		}
		// A scratch set: a bad CRD must not leak into other tests.
		errs = append(errs, NewCRDs().Add(t.Context(), &crd)...)
	}
	errs = append(errs, v.Validate(t.Context(), o)...)
	return append(errs, checkAgentConfig(o)...)
}

// TestRejects feeds documents that the API server (or the agent) would
// refuse; each names in a "# want:" line a text its error must contain.
func TestRejects(t *testing.T) {
	v := testValidator(t)
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			doc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(doc), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line %q is not a # want: line", first)
			}
			errs := check(t, v, doc)
			if len(errs) == 0 {
				t.Fatalf("accepted; want an error containing %q", want)
			}
			for _, e := range errs {
				if strings.Contains(e.Error(), want) {
					return
				}
			}
			t.Errorf("errors %v; want one containing %q", errs, want)
		})
	}
}

// TestChartRendersValid renders every variant and validates each object.
func TestChartRendersValid(t *testing.T) {
	v := testValidator(t)
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, variant := range Variants() {
		t.Run(variant.Name, func(t *testing.T) {
			rendered, err := Render(ch, variant.Values, variant.APIVersions...)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, m := range rendered {
				o, err := Decode([]byte(m.Content))
				if err != nil {
					t.Fatalf("%s: %v", m.Source, err)
				}
				if o == nil {
					continue
				}
				// The dashboard's ConfigMap is not the agent's.
				if !strings.HasSuffix(m.Source, "grafana-dashboard.yaml") {
					kinds[o.GVK.Kind]++
				}
				for _, err := range append(v.Validate(t.Context(), o), checkAgentConfig(o)...) {
					t.Errorf("%s: %s: %v", m.Source, o, err)
				}
			}
			if kinds["DaemonSet"] != 1 || kinds["ConfigMap"] != 1 {
				t.Errorf("kinds %v: want one agent DaemonSet and ConfigMap", kinds)
			}
		})
	}
}

// TestRenderFeatures checks what each optional feature adds.
func TestRenderFeatures(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	count := func(values map[string]any) map[string]int {
		t.Helper()
		rendered, err := Render(ch, values)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, m := range rendered {
			o, err := Decode([]byte(m.Content))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case o == nil:
			case o.Name == "slingshot-viewer" || o.Name == "slingshot-agent-inspector":
				// kubectl slingshot's roles, counted apart: the
				// counts below are the programs' own.
				kinds[o.GVK.Kind+" of kubectl slingshot"]++
			default:
				kinds[o.GVK.Kind]++
			}
		}
		return kinds
	}
	def := count(nil)
	for kind, want := range map[string]int{"Deployment": 1, "Service": 1, "PersistentVolumeClaim": 1, "ClusterRole": 2, "Role": 0, "PodDisruptionBudget": 0, "DecoratorController": 0, "ServiceMonitor": 0, "PrometheusRule": 0, "NetworkPolicy": 1} {
		if def[kind] != want {
			t.Errorf("defaults: %d %s, want %d", def[kind], kind, want)
		}
	}
	var all map[string]any
	for _, v := range Variants() {
		if v.Name == "all-features" {
			all = v.Values
		}
	}
	on := count(all)
	for kind, want := range map[string]int{"DecoratorController": 1, "ServiceMonitor": 2, "PrometheusRule": 1, "NetworkPolicy": 1, "Service": 2, "PersistentVolumeClaim": 0} {
		if on[kind] != want {
			t.Errorf("all features: %d %s, want %d", on[kind], kind, want)
		}
	}
	kube := count(map[string]any{"controller": map[string]any{"store": "kube", "replicas": 3}})
	for kind, want := range map[string]int{"Deployment": 1, "PersistentVolumeClaim": 0, "Role": 1, "RoleBinding": 1} {
		if kube[kind] != want {
			t.Errorf("store kube: %d %s, want %d", kube[kind], kind, want)
		}
	}
	for _, tc := range []struct {
		values map[string]any
		want   int
	}{{nil, 1}, {map[string]any{"kubectlPlugin": map[string]any{"rbac": false}}, 0}} {
		got := count(tc.values)
		for _, kind := range []string{"ClusterRole of kubectl slingshot", "Role of kubectl slingshot"} {
			if got[kind] != tc.want {
				t.Errorf("values %v: %d %s, want %d", tc.values, got[kind], kind, tc.want)
			}
		}
	}
	embedded := count(map[string]any{"controller": map[string]any{"enabled": false}})
	for _, kind := range []string{"Deployment", "Service"} {
		if embedded[kind] != 0 {
			t.Errorf("embedded controller: %d %s, want none", embedded[kind], kind)
		}
	}
	// The agent's ClusterRole alone (events, its node's taint): the
	// controller's goes with it.
	if embedded["ClusterRole"] != 1 {
		t.Errorf("embedded controller: %d ClusterRole, want the agent's alone", embedded["ClusterRole"])
	}
}

// TestRenderRefuses checks the value combinations the chart refuses.
func TestRenderRefuses(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unprivileged uapi":        {map[string]any{"agent": map[string]any{"privileged": false}}, "needs agent.cxiDriver=sim"},
		"unknown driver":           {map[string]any{"agent": map[string]any{"cxiDriver": "ioctl"}}, "want uapi or sim"},
		"hooks without controller": {map[string]any{"controller": map[string]any{"enabled": false}, "metacontroller": map[string]any{"enabled": true}}, "needs controller.enabled"},
		"unknown store":            {map[string]any{"controller": map[string]any{"store": "etcd"}}, `controller.store "etcd": want sqlite or kube`},
		"replicas with sqlite":     {map[string]any{"controller": map[string]any{"replicas": 2}}, "controller.replicas=2 needs controller.store=kube"},
		"replicas without election": {map[string]any{"controller": map[string]any{"store": "kube", "replicas": 3, "leaderElect": false}},
			"controller.replicas=3 needs controller.leaderElect=true"},
		"replicas from --set (int64)":    {map[string]any{"controller": map[string]any{"replicas": int64(2)}}, "controller.replicas=2 needs controller.store=kube"},
		"replicas from a file (float64)": {map[string]any{"controller": map[string]any{"replicas": float64(2)}}, "controller.replicas=2 needs controller.store=kube"},
		"fractional replicas":            {map[string]any{"controller": map[string]any{"store": "kube", "replicas": 1.5}}, "want a whole number"},
		"replicas as text":               {map[string]any{"controller": map[string]any{"store": "kube", "replicas": "3"}}, "want a whole number"},
		"negative replicas":              {map[string]any{"controller": map[string]any{"replicas": -1}}, "want a whole number"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(ch, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestGeneratedFresh is the staleness check of CI as a test.
func TestGeneratedFresh(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := Generated("../..", ch)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := Stale("../..", gen)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("stale generated files (run make manifests): %v", stale)
	}
}

// TestManifestDirsInstallOneController reads each plain manifests
// directory as `kubectl apply -f DIR/` does (its *.yaml files, not its
// subdirectories: that takes -R) and checks that it installs one
// controller Deployment: deploy/manifests/ the default one, and
// deploy/manifests/ha/ the kube-ha one, so neither command starts both.
func TestManifestDirsInstallOneController(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		replicas int32
		args     []string
	}{
		{manifestsDir, 1, []string{"--db=/var/lib/slingshot-controller/controller.db"}},
		{haManifestsDir, 3, []string{"--store=kube", "--store-namespace=" + releaseNamespace, "--leader-elect"}},
		{draManifestsDir, 1, []string{"--db=/var/lib/slingshot-controller/controller.db"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			files, err := readDir(filepath.Join("../..", tc.dir))
			if err != nil {
				t.Fatal(err)
			}
			var deployments []appsv1.Deployment
			for _, f := range files {
				for _, doc := range splitDocuments(f.data) {
					o, err := Decode(doc)
					if err != nil {
						t.Fatalf("%s: %v", f.name, err)
					}
					if o == nil || o.GVK.Kind != "Deployment" {
						continue
					}
					var d appsv1.Deployment
					if err := json.Unmarshal(o.JSON, &d); err != nil {
						t.Fatal(err)
					}
					deployments = append(deployments, d)
				}
			}
			if len(deployments) != 1 {
				t.Fatalf("kubectl apply -f %s/ makes %d Deployments, want the controller's alone", tc.dir, len(deployments))
			}
			d := deployments[0]
			if d.Name != "slingshot-controller" || d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("Deployment %s with %v replicas, want slingshot-controller with %d", d.Name, d.Spec.Replicas, tc.replicas)
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, a := range tc.args {
				if !slices.Contains(args, a) {
					t.Errorf("controller args %v lack %s", args, a)
				}
			}
		})
	}
}

// TestStaleDetectsEdits: an edited generated file, a missing one and a
// file nothing generates are stale, in deploy/manifests and in its ha/
// subdirectory (itself generated, so not reported); Write mends them.
func TestStaleDetectsEdits(t *testing.T) {
	root := t.TempDir()
	gen := map[string][]byte{manifestFile: []byte("a: 1\n"), haManifestFile: []byte("b: 1\n")}
	if err := Write(root, gen); err != nil {
		t.Fatal(err)
	}
	if stale, _ := Stale(root, gen); len(stale) != 0 {
		t.Fatalf("fresh write reported stale: %v", stale)
	}
	if err := os.WriteFile(filepath.Join(root, manifestFile), []byte("a: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, haManifestFile), []byte("b: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(root, manifestsDir, "old.yaml")
	haExtra := filepath.Join(root, haManifestsDir, "old.yaml")
	for _, p := range []string{extra, haExtra} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale, _ := Stale(root, gen)
	want := []string{haManifestsDir + "/old.yaml (not generated)", haManifestFile, manifestsDir + "/old.yaml (not generated)", manifestFile}
	if !slices.Equal(stale, want) {
		t.Fatalf("stale %v, want %v", stale, want)
	}
	if err := os.Remove(filepath.Join(root, haManifestFile)); err != nil {
		t.Fatal(err)
	}
	if stale, _ := Stale(root, gen); !slices.Contains(stale, haManifestFile) {
		t.Fatalf("stale %v: want the missing %s", stale, haManifestFile)
	}
	if err := Write(root, gen); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{extra, haExtra} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Write kept %s", p)
		}
	}
	if stale, _ := Stale(root, gen); len(stale) != 0 {
		t.Errorf("stale after Write: %v", stale)
	}
}

func TestValuesDocs(t *testing.T) {
	for name, tc := range map[string]struct {
		in      string
		rows    []ValueDoc
		wantErr string
	}{
		"documented leaves and maps": {
			in: "# -- Top.\na: 1\nb:\n  # -- Inner,\n  # two lines.\n  c: x\n  # -- Whole map.\n  d: {e: true}\n",
			rows: []ValueDoc{
				{Key: "a", Type: "int", Default: "1", Description: "Top."},
				{Key: "b.c", Type: "string", Default: `"x"`, Description: "Inner, two lines."},
				{Key: "b.d", Type: "object", Default: `{"e":true}`, Description: "Whole map."},
			},
		},
		"plain comment is not documentation": {in: "# Top.\na: 1\n", wantErr: "a has no"},
		"undocumented nested":                {in: "b:\n  c: []\n", wantErr: "b.c has no"},
	} {
		t.Run(name, func(t *testing.T) {
			rows, err := ValuesDocs([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(tc.rows) {
				t.Fatalf("rows %+v; want %+v", rows, tc.rows)
			}
			for i := range rows {
				if rows[i] != tc.rows[i] {
					t.Errorf("row %d %+v; want %+v", i, rows[i], tc.rows[i])
				}
			}
		})
	}
}

func TestReplaceTable(t *testing.T) {
	in := "x\n" + tableStart + "\nold\n" + tableEnd + "\ny\n"
	out, err := ReplaceTable(in, "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "x\n" + tableStart + "\nnew\n" + tableEnd + "\ny\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if _, err := ReplaceTable("no markers", "t"); err == nil {
		t.Error("no error without markers")
	}
}

func TestSplitDocuments(t *testing.T) {
	docs := splitDocuments([]byte("a: 1\n---\n# c\n---\nb: 2\n"))
	if len(docs) != 3 || !bytes.Equal(docs[0], []byte("a: 1\n")) || !bytes.Equal(docs[2], []byte("b: 2\n")) {
		t.Errorf("docs %q", docs)
	}
	if o, err := Decode(docs[1]); o != nil || err != nil {
		t.Errorf("comment-only document: %v, %v", o, err)
	}
}

func TestConsistency(t *testing.T) {
	const base = `apiVersion: apps/v1
kind: Deployment
metadata: {name: c, namespace: ns}
spec:
  selector: {matchLabels: {app: SEL}}
  template:
    metadata: {labels: {app: c}}
    spec:
      serviceAccountName: SA
      containers:
      - name: c
        image: c
        ports: [{name: http, containerPort: 80}]
        readinessProbe: {httpGet: {path: /, port: PROBE}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: c, namespace: ns}
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: ns}
spec:
  selector: {app: SVCSEL}
  ports: [{port: 80, targetPort: TARGET}]
`
	for name, tc := range map[string]struct {
		repl []string
		want string
	}{
		"consistent":           {[]string{"SEL", "c", "SA", "c", "PROBE", "http", "SVCSEL", "c", "TARGET", "http"}, ""},
		"selector misses":      {[]string{"SEL", "other", "SA", "c", "PROBE", "http", "SVCSEL", "c", "TARGET", "http"}, "does not select its pod template"},
		"missing account":      {[]string{"SEL", "c", "SA", "gone", "PROBE", "http", "SVCSEL", "c", "TARGET", "http"}, "ServiceAccount/gone"},
		"probe port":           {[]string{"SEL", "c", "SA", "c", "PROBE", "metrics", "SVCSEL", "c", "TARGET", "http"}, `probes port "metrics"`},
		"service selects none": {[]string{"SEL", "c", "SA", "c", "PROBE", "http", "SVCSEL", "x", "TARGET", "http"}, "selects no pod"},
		"service target port":  {[]string{"SEL", "c", "SA", "c", "PROBE", "http", "SVCSEL", "c", "TARGET", "grpc"}, `target port "grpc"`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.NewReplacer(tc.repl...).Replace(base)
			var objs []*Object
			for _, d := range splitDocuments([]byte(doc)) {
				o, err := Decode(d)
				if err != nil {
					t.Fatal(err)
				}
				objs = append(objs, o)
			}
			errs := Consistency(objs, nil)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("errors %v", errs)
				}
				return
			}
			for _, e := range errs {
				if strings.Contains(e.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors %v; want one containing %q", errs, tc.want)
		})
	}
}

// TestRun is the CI check: the full validation of the repository's chart,
// manifests, CRDs and examples, and the staleness check of the generated
// files, exactly as `go run .` does it.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"-root", "../.."}, &out)
	t.Log(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
}

func TestValuesDocsRejectsComplexKeys(t *testing.T) {
	// Found by FuzzValuesDocs: a sequence as a key gave a row without a key.
	if _, err := ValuesDocs([]byte("# --\n? [a]\n: b\n")); err == nil || !strings.Contains(err.Error(), "not a plain name") {
		t.Errorf("err %v; want a complex key refused", err)
	}
}

// renderObjects renders values and decodes every object, by "Kind/name".
func renderObjects(t *testing.T, values map[string]any) map[string]*Object {
	t.Helper()
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*Object{}
	for _, m := range rendered {
		o, err := Decode([]byte(m.Content))
		if err != nil {
			t.Fatalf("%s: %v", m.Source, err)
		}
		if o != nil {
			objs[o.GVK.Kind+"/"+o.Name] = o
		}
	}
	return objs
}

// TestControllerStore checks the controller's Deployment and namespaced
// RBAC for each store: sqlite keeps one Recreate replica on its volume;
// kube drops the volume, passes the store's flags and the pod name as
// identity, and with an election replaces every pod at once (only the
// leader is ready, so a rollout that waited for readiness would stall)
// and spreads the pods over nodes.
func TestControllerStore(t *testing.T) {
	for name, tc := range map[string]struct {
		values     map[string]any
		replicas   int32
		strategy   appsv1.DeploymentStrategyType
		args       []string // present
		noArgs     []string // absent
		identity   bool
		volume     bool
		antiAffine bool
		rules      []rbacv1.PolicyRule
	}{
		"sqlite": {
			values: nil, replicas: 1, strategy: appsv1.RecreateDeploymentStrategyType,
			args:   []string{"--db=/var/lib/slingshot-controller/controller.db"},
			noArgs: []string{"--store=kube", "--leader-elect"}, volume: true,
		},
		"kube, one replica, no election": {
			values:   map[string]any{"controller": map[string]any{"store": "kube", "leaderElect": false}},
			replicas: 1, strategy: appsv1.RecreateDeploymentStrategyType,
			args:   []string{"--store=kube", "--store-namespace=" + releaseNamespace},
			noArgs: []string{"--leader-elect", "--db=/var/lib/slingshot-controller/controller.db"}, identity: true,
			rules: storeRules,
		},
		"kube, three replicas": {
			values:   map[string]any{"controller": map[string]any{"store": "kube", "replicas": 3}},
			replicas: 3, strategy: appsv1.RollingUpdateDeploymentStrategyType,
			args:   []string{"--store=kube", "--store-namespace=" + releaseNamespace, "--leader-elect"},
			noArgs: []string{"--db=/var/lib/slingshot-controller/controller.db"}, identity: true, antiAffine: true,
			rules: append(append([]rbacv1.PolicyRule{}, storeRules...), electionRules...),
		},
		"kube ignores persistence": {
			values: map[string]any{"controller": map[string]any{"store": "kube",
				"persistence": map[string]any{"existingClaim": "leases"}}},
			replicas: 1, strategy: appsv1.RollingUpdateDeploymentStrategyType,
			args: []string{"--store=kube", "--leader-elect"}, identity: true,
			rules: append(append([]rbacv1.PolicyRule{}, storeRules...), electionRules...),
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := renderObjects(t, tc.values)
			o := objs["Deployment/slingshot-controller"]
			if o == nil {
				t.Fatal("no controller Deployment")
			}
			var d appsv1.Deployment
			if err := json.Unmarshal(o.JSON, &d); err != nil {
				t.Fatal(err)
			}
			if got := *d.Spec.Replicas; got != tc.replicas {
				t.Errorf("replicas %d, want %d", got, tc.replicas)
			}
			if d.Spec.Strategy.Type != tc.strategy {
				t.Errorf("strategy %s, want %s", d.Spec.Strategy.Type, tc.strategy)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru != nil && (ru.MaxUnavailable.String() != "100%" || ru.MaxSurge.String() != "100%") {
				t.Errorf("rolling update %v/%v, want every pod replaced at once", ru.MaxSurge, ru.MaxUnavailable)
			}
			c := d.Spec.Template.Spec.Containers[0]
			for _, a := range tc.args {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			for _, a := range tc.noArgs {
				if slices.Contains(c.Args, a) {
					t.Errorf("args %v have %s", c.Args, a)
				}
			}
			identity := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "SLINGSHOT_CONTROLLER_IDENTITY" && e.ValueFrom != nil &&
					e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			})
			if identity != tc.identity {
				t.Errorf("identity from the pod name: %v, want %v", identity, tc.identity)
			}
			volume := slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })
			if volume != tc.volume || (objs["PersistentVolumeClaim/slingshot-controller-data"] != nil) != tc.volume {
				t.Errorf("data volume %v (claim %v), want %v", volume, objs["PersistentVolumeClaim/slingshot-controller-data"] != nil, tc.volume)
			}
			aff := d.Spec.Template.Spec.Affinity
			antiAffine := aff != nil && aff.PodAntiAffinity != nil && len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1 &&
				aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey == "kubernetes.io/hostname"
			if antiAffine != tc.antiAffine {
				t.Errorf("anti-affinity %v, want %v", antiAffine, tc.antiAffine)
			}
			if aff != nil && aff.PodAntiAffinity != nil {
				sel := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector
				if !labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("anti-affinity selector %v misses the controller's pods %v", sel, d.Spec.Template.Labels)
				}
			}
			role := objs["Role/slingshot-controller"]
			if (role != nil) != (tc.rules != nil) || (objs["RoleBinding/slingshot-controller"] != nil) != (tc.rules != nil) {
				t.Fatalf("Role %v, RoleBinding %v; want them: %v", role != nil, objs["RoleBinding/slingshot-controller"] != nil, tc.rules != nil)
			}
			if role != nil {
				var r rbacv1.Role
				if err := json.Unmarshal(role.JSON, &r); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(r.Rules, tc.rules) {
					t.Errorf("Role rules\n%+v\nwant\n%+v", r.Rules, tc.rules)
				}
			}
		})
	}
}

// storeRules are the calls of controller/store/kube (client.go: get,
// put, remove, listAll; store.go names which resource gets which).
var storeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"slingshot.hpe.com"}, Resources: []string{"vnileases", "nodeslices", "vniquarantines"}, Verbs: []string{"list", "create", "update", "delete"}},
	{APIGroups: []string{"slingshot.hpe.com"}, Resources: []string{"storejournals"}, Verbs: []string{"list", "create", "delete"}},
	{APIGroups: []string{"slingshot.hpe.com"}, Resources: []string{"storejournals"}, ResourceNames: []string{"slingshot-controller"}, Verbs: []string{"get", "update"}},
}

// electionRules are the calls of client-go's LeaseLock (controller/leader).
var electionRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"slingshot-controller"}, Verbs: []string{"get", "update"}},
}

// TestStoreCRDsCopied fails when deploy/crds or the chart's crds/ hold a
// store CRD that differs from controller/store/kube/crds, its source.
func TestStoreCRDsCopied(t *testing.T) {
	src, err := readDir("../../" + storeCRDDir)
	if err != nil || len(src) == 0 {
		t.Fatalf("store CRDs: %v (%d files)", err, len(src))
	}
	for _, f := range src {
		for _, dir := range []string{crdDir, chartDir + "/crds"} {
			got, err := os.ReadFile(filepath.Join("../..", dir, f.name))
			if err != nil {
				t.Errorf("%s: %v", dir, err)
				continue
			}
			if !bytes.Equal(got, f.data) {
				t.Errorf("%s/%s differs from %s/%s: run make manifests", dir, f.name, storeCRDDir, f.name)
			}
		}
	}
}

// TestGeneratedCRDs checks that the store CRDs replace same-named files of
// deploy/crds, that hand-written CRDs stay, and that a drifted copy is
// stale until written.
func TestGeneratedCRDs(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		storeCRDDir + "/a_nodeslices.yaml": "scope: Namespaced\n",
		storeCRDDir + "/b_leases.yaml":     "kind: lease\n",
		crdDir + "/a_nodeslices.yaml":      "scope: Cluster\n", // the old placeholder
		crdDir + "/c_claims.yaml":          "kind: claim\n",    // written by hand
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gen, all, err := GeneratedCRDs(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range all {
		names = append(names, f.name+"="+strings.TrimSpace(string(f.data)))
	}
	if want := []string{"a_nodeslices.yaml=scope: Namespaced", "b_leases.yaml=kind: lease", "c_claims.yaml=kind: claim"}; !slices.Equal(names, want) {
		t.Errorf("CRDs %v, want %v", names, want)
	}
	if _, ok := gen[crdDir+"/c_claims.yaml"]; ok {
		t.Error("a hand-written CRD is generated")
	}
	stale, err := Stale(root, gen)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{crdDir + "/a_nodeslices.yaml", crdDir + "/b_leases.yaml",
		chartDir + "/crds/a_nodeslices.yaml", chartDir + "/crds/b_leases.yaml", chartDir + "/crds/c_claims.yaml"}
	if !slices.Equal(stale, want) {
		t.Errorf("stale %v, want %v", stale, want)
	}
	if err := Write(root, gen); err != nil {
		t.Fatal(err)
	}
	if stale, _ := Stale(root, gen); len(stale) != 0 {
		t.Errorf("stale after write: %v", stale)
	}
	got, err := os.ReadFile(filepath.Join(root, crdDir, "a_nodeslices.yaml"))
	if err != nil || string(got) != files[storeCRDDir+"/a_nodeslices.yaml"] {
		t.Errorf("deploy/crds copy %q, %v; want the store's", got, err)
	}
	if _, _, err := GeneratedCRDs(t.TempDir()); err == nil {
		t.Error("no error without store CRDs")
	}
}

// controller.hwcoll: off by default; with fmURL the controller gets the
// --hwcoll-* flags and each credential Secret is mounted whole (no
// subPath, so a rotated credential reaches the files) where its flag
// points.
func TestControllerHWColl(t *testing.T) {
	deployment := func(values map[string]any) appsv1.Deployment {
		t.Helper()
		o := renderObjects(t, values)["Deployment/slingshot-controller"]
		if o == nil {
			t.Fatal("no controller Deployment")
		}
		var d appsv1.Deployment
		if err := json.Unmarshal(o.JSON, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	off := deployment(nil)
	for _, a := range off.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--hwcoll-") {
			t.Errorf("default chart passes %s", a)
		}
	}
	on := deployment(map[string]any{"controller": map[string]any{"hwcoll": map[string]any{"fmURL": "https://fmn:8000",
		"addrsPerJob": 4, "oauthSecret": "fm-oauth", "tlsSecret": "fm-tls", "caSecret": "fm-ca"}}})
	c := on.Spec.Template.Spec.Containers[0]
	for _, a := range []string{"--hwcoll-fm-url=https://fmn:8000", "--hwcoll-job-prefix=k8s", "--hwcoll-addrs-per-job=4", "--hwcoll-min-nodes=2",
		"--hwcoll-oauth-dir=/etc/slingshot/hwcoll/oauth", "--hwcoll-cert=/etc/slingshot/hwcoll/tls/tls.crt",
		"--hwcoll-key=/etc/slingshot/hwcoll/tls/tls.key", "--hwcoll-ca=/etc/slingshot/hwcoll/ca/ca.crt"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	for vol, secret := range map[string]string{"hwcoll-oauth": "fm-oauth", "hwcoll-tls": "fm-tls", "hwcoll-ca": "fm-ca"} {
		i := slices.IndexFunc(on.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
		if i < 0 || on.Spec.Template.Spec.Volumes[i].Secret == nil || on.Spec.Template.Spec.Volumes[i].Secret.SecretName != secret {
			t.Errorf("volume %s: want Secret %s", vol, secret)
		}
		j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol })
		if j < 0 || !c.VolumeMounts[j].ReadOnly || c.VolumeMounts[j].SubPath != "" {
			t.Errorf("mount of %s: want read-only, whole", vol)
		}
	}
}

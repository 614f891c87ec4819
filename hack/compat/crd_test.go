package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// crd is what this test reads of a CustomResourceDefinition.
type crd struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind   string `json:"kind"`
			Plural string `json:"plural"`
		} `json:"names"`
		Versions []crdVersion `json:"versions"`
	} `json:"spec"`
}

type crdVersion struct {
	Name    string `json:"name"`
	Served  bool   `json:"served"`
	Storage bool   `json:"storage"`
	Schema  struct {
		OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
	} `json:"schema"`
}

func readCRDs(t *testing.T, root string) map[string]crd {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("CRDs in %s: %d files, %v", root, len(paths), err)
	}
	out := map[string]crd{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var c crd
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[c.Metadata.Name] = c
	}
	return out
}

// HEAD's CRDs keep every object the baseline's controller stored readable
// and valid, so that CRDs can be applied first and a rollback needs no
// change to them (docs/upgrade.md): every CRD and version of the
// baseline is still there and served, the version the baseline stores
// in is still served, and each version's schema only adds: no property
// gone or of another type, no property newly required, no enum value
// gone.
func TestCRDsOnlyAdd(t *testing.T) {
	w := setup(t)
	olds, news := readCRDs(t, w.baseline), readCRDs(t, w.root)
	for _, name := range sortedKeys(olds) {
		o, n := olds[name], news[name]
		if n.Metadata.Name == "" {
			failf(t, "CRD %s of the baseline is gone: the objects of it in etcd would be orphaned", name)
			continue
		}
		if o.Spec.Group != n.Spec.Group || o.Spec.Scope != n.Spec.Scope || o.Spec.Names.Kind != n.Spec.Names.Kind || o.Spec.Names.Plural != n.Spec.Names.Plural {
			failf(t, "CRD %s: group, scope, kind or plural changed: %s %s %s %s, the baseline's %s %s %s %s", name,
				n.Spec.Group, n.Spec.Scope, n.Spec.Names.Kind, n.Spec.Names.Plural, o.Spec.Group, o.Spec.Scope, o.Spec.Names.Kind, o.Spec.Names.Plural)
		}
		for _, ov := range o.Spec.Versions {
			i := slices.IndexFunc(n.Spec.Versions, func(v crdVersion) bool { return v.Name == ov.Name })
			if i < 0 {
				failf(t, "CRD %s: version %s of the baseline is gone", name, ov.Name)
				continue
			}
			nv := n.Spec.Versions[i]
			if ov.Served && !nv.Served {
				failf(t, "CRD %s: version %s is no longer served; the baseline's controller reads and writes it", name, ov.Name)
			}
			if ov.Storage && !nv.Storage {
				// Objects stay stored in the baseline's version until
				// rewritten: a new storage version needs a migration
				// that docs/upgrade.md describes, and this test taught.
				failf(t, "CRD %s: the storage version moved from %s to another; write its migration into docs/upgrade.md and teach this test", name, ov.Name)
			}
			for _, diff := range schemaLosses(ov.Schema.OpenAPIV3Schema, nv.Schema.OpenAPIV3Schema, name+"/"+ov.Name) {
				failf(t, "%s", diff)
			}
		}
	}
}

// schemaLosses lists what schema n (HEAD's) lost or tightened of schema
// o (the baseline's) at path.
func schemaLosses(o, n map[string]any, path string) []string {
	var out []string
	if n == nil {
		return []string{path + ": gone"}
	}
	if o["type"] != n["type"] {
		out = append(out, fmt.Sprintf("%s: type %v, the baseline's %v", path, n["type"], o["type"]))
	}
	for _, r := range list(n["required"]) {
		if !slices.Contains(list(o["required"]), r) {
			out = append(out, fmt.Sprintf("%s: %q is newly required; objects the baseline wrote lack it", path, r))
		}
	}
	for _, v := range list(o["enum"]) {
		if ne := list(n["enum"]); n["enum"] != nil && !slices.Contains(ne, v) {
			out = append(out, fmt.Sprintf("%s: enum value %v is gone", path, v))
		}
	}
	// Bounds may widen, never narrow: an object the baseline wrote within
	// them must stay valid.
	for _, b := range []struct {
		key  string
		less bool // HEAD's may be less (a maximum), else more (a minimum)
	}{{"minimum", false}, {"maximum", true}, {"minLength", false}, {"maxLength", true}, {"minItems", false}, {"maxItems", true}, {"minProperties", false}, {"maxProperties", true}} {
		ov, oset := number(o[b.key])
		nv, nset := number(n[b.key])
		switch {
		case !nset:
		case !oset:
			out = append(out, fmt.Sprintf("%s: %s %v is new", path, b.key, nv))
		case b.less && nv < ov, !b.less && nv > ov:
			out = append(out, fmt.Sprintf("%s: %s %v, the baseline's %v", path, b.key, nv, ov))
		}
	}
	if n["pattern"] != nil && n["pattern"] != o["pattern"] {
		out = append(out, fmt.Sprintf("%s: pattern %v, the baseline's %v", path, n["pattern"], o["pattern"]))
	}
	op, _ := o["properties"].(map[string]any)
	np, _ := n["properties"].(map[string]any)
	for _, k := range sortedKeys(op) {
		npk, _ := np[k].(map[string]any)
		opk, _ := op[k].(map[string]any)
		out = append(out, schemaLosses(opk, npk, path+"."+k)...)
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if oi, ok := o[k].(map[string]any); ok {
			ni, _ := n[k].(map[string]any)
			out = append(out, schemaLosses(oi, ni, path+"."+k)...)
		}
	}
	return out
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package main

import (
	"testing"
)

// FuzzValuesDocs: any values.yaml gives rows or an error, never a panic,
// and a row's key is never empty.
func FuzzValuesDocs(f *testing.F) {
	for _, seed := range []string{
		"# -- Top.\na: 1\nb:\n  # -- Inner.\n  c: x\n",
		"a:\n  b: {}\n",
		"# -- list\nl: [1, {a: b}]\n",
		"- not a map\n",
		"# --\n? [a]\n: b\n",
		"a: &x {b: 1}\nc: *x\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ValuesDocs(data)
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.Key == "" {
				t.Fatalf("row with empty key: %+v", r)
			}
		}
		_ = ValuesTable(rows)
	})
}

// FuzzDecode: any YAML stream splits into documents that decode to an
// object or an error, never a panic; a decoded object has a kind.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\n",
		"---\n# only a comment\n---\napiVersion: apps/v1\nkind: DaemonSet\n",
		"apiVersion: v1/v2/v3\nkind: X\n",
		"a: 1\na: 2\n",
		"[1, 2]\n",
		"apiVersion: v1\nkind: Pod\nmetadata: [1]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, doc := range splitDocuments(data) {
			o, err := Decode(doc)
			if err != nil || o == nil {
				continue
			}
			if o.GVK.Kind == "" || o.GVK.Version == "" {
				t.Fatalf("decoded %q without a kind or version", doc)
			}
			_ = o.String()
		}
	})
}

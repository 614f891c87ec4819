package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

func TestStoreFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(*Config) bool
	}{
		{name: "sqlite by default", check: func(c *Config) bool { return c.Store == "sqlite" && !c.LeaderElect }},
		{name: "sqlite:PATH", args: []string{"--store", "sqlite:/data/c.db"}, check: func(c *Config) bool { return c.Store == "sqlite" && c.DB == "/data/c.db" }},
		{name: "kube with election", args: []string{"--store", "kube", "--leader-elect", "--store-namespace", "slingshot"},
			check: func(c *Config) bool { return c.Store == "kube" && c.LeaderElect && c.election("ns").LeaseDuration > 0 }},
		{name: "election on sqlite", args: []string{"--leader-elect"}, wantErr: "needs --store kube"},
		{name: "kube without kube", args: []string{"--store", "kube", "--no-kube", "--auth", "none"}, wantErr: "needs the Kubernetes API"},
		{name: "unknown store", args: []string{"--store", "etcd"}, wantErr: "want sqlite or kube"},
		{name: "slice ranges for kubectl", args: []string{"--pod-vni-range", "2048-2175", "--ip-pools", "hsn0=10.150.0.0/16:/24"},
			check: func(c *Config) bool {
				return c.sliceRange("pod-vni", 1) == "2112-2175" && c.sliceRange("hsn0", 2) == "10.150.2.0/24" && c.sliceRange("x", 0) == ""
			}},
		{name: "bad election timing", args: []string{"--store", "kube", "--leader-elect", "--leader-elect-renew-deadline", "9s"}, wantErr: "renew deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, env(nil), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
	var b strings.Builder
	if _, err := parseFlags([]string{"--help"}, env(nil), &b); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, f := range []string{"--store", "store-namespace", "identity", "leader-elect", "leader-elect-lease-duration"} {
		if !strings.Contains(b.String(), f) {
			t.Errorf("--help lacks %s", f)
		}
	}
}

// TestExportImportCommands runs the export and import commands between two
// sqlite files (the kube store's side runs in hack/kube-apiserver).
func TestExportImportCommands(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	st, err := sqlite.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	l := &store.Lease{Key: "job/ns/u1", VNI: 1500, Scope: store.ScopeJob, Nodes: []string{"n1"},
		Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ns", Name: "j", UID: "u1"}}
	if err := st.Commit(ctx, []store.Op{store.Put(l, 0), store.Put(&store.Meta{Key: "vni-cursor", Value: "1500"}, 0)}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var doc, errw bytes.Buffer
	if err := runTransfer(ctx, "export", []string{"--store", "sqlite:" + src}, env(nil), nil, &doc, &errw); err != nil {
		t.Fatalf("export: %v (%s)", err, errw.String())
	}
	dst := filepath.Join(dir, "dst.db")
	if err := runTransfer(ctx, "import", nil, env(map[string]string{"SLINGSHOT_CONTROLLER_STORE": "sqlite:" + dst}),
		bytes.NewReader(doc.Bytes()), io.Discard, &errw); err != nil {
		t.Fatalf("import: %v (%s)", err, errw.String())
	}
	if !strings.Contains(errw.String(), "imported 2 records") {
		t.Fatalf("import said %q", errw.String())
	}
	st, err = sqlite.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Leases) != 1 || got.Leases[0].VNI != 1500 || len(got.Meta) != 1 {
		t.Fatalf("imported state %+v", got)
	}
	for _, args := range [][]string{{"--store", "etcd"}, {"--store", "sqlite:" + filepath.Join(dir, "missing.db")}, {"stray"}} {
		if err := runTransfer(ctx, "export", args, env(nil), nil, io.Discard, io.Discard); err == nil {
			t.Errorf("export %v succeeded", args)
		}
	}
}

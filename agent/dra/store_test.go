package dra

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// A claims.json an earlier agent wrote joins the checkpoint whole and is
// set aside; a damaged one or another node's is refused, never an empty
// state.
func TestMigrateLegacy(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"version":1,"node":"node-a","claims":{"u1":{"uid":"u1","namespace":"ns","name":"c1",
	  "config":{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"job"},
	  "results":[{"request":"nic","pool":"node-a","device":"cxi0"}],"leaseKey":"job/ns/j","vni":2000,"scope":"job",
	  "services":[{"nic":"cxi0","id":4,"netns":4026531900}],"boundPod":"uid-p","prepared":true,"created":"2026-11-01T00:00:00Z"}},
	  "checksum":"ignored by the migration: the file is read once"}`
	path := filepath.Join(dir, LegacyStoreName)
	if err := os.WriteFile(path, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Open(filepath.Join(dir, "checkpoint.json"), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	n, err := MigrateLegacy(dir, "node-a", st)
	if err != nil || n != 1 {
		t.Fatalf("migrate = %d, %v", n, err)
	}
	again, err := checkpoint.Open(filepath.Join(dir, "checkpoint.json"), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := again.Get(checkpoint.ClaimID("u1"))
	if !ok || c.Kind != checkpoint.KindClaim || c.VNI != 2000 || c.Config.VNI != "job" || len(c.Services) != 1 || c.Services[0].Netns != 4026531900 || c.Netns != 4026531900 || !c.Prepared {
		t.Fatalf("migrated claim %+v", c)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the legacy file was not set aside")
	}
	if n, err := MigrateLegacy(dir, "node-a", again); n != 0 || err != nil {
		t.Fatalf("second start: %d, %v", n, err)
	}

	if err := os.WriteFile(path, []byte(`{"version":1,"node":"node-b","claims":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := MigrateLegacy(dir, "node-a", again); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("another node's file: %v, want ErrCorrupt", err)
	}
}

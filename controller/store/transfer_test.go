package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	// Not t.TempDir: fuzz subtests are named seed#N, and sqlite.Open reads
	// a '#' in its path as the start of a URI fragment.
	dir, err := os.MkdirTemp("", "transfer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func sampleOps() []store.Op {
	at := time.UnixMilli(1_700_000_000_000)
	return []store.Op{
		store.Put(&store.Meta{Key: "vni-cursor", Value: "1502"}, 0),
		store.Put(&store.Lease{Key: "job/ns/u1", VNI: 1500, Scope: store.ScopeJob, Nodes: []string{"n1", "n2"}, Created: at,
			Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ns", Name: "train", UID: "u1"}}, 0),
		store.Put(&store.Lease{Key: "claim/ns/ring", VNI: 1501, Scope: store.ScopeClaim, OwnerGone: true, Created: at,
			Owner: store.Owner{APIVersion: "slingshot.hpe.com/v1alpha1", Kind: "VNIClaim", Namespace: "ns", Name: "ring"}}, 0),
		store.Put(&store.Quarantine{VNI: 1499, Released: at}, 0),
		store.Put(&store.Slice{Pool: "pod-vni", Index: 3, Node: "n1", Expires: at.Add(time.Minute), Allocated: 2, Reported: at}, 0),
		store.Put(&store.Slice{Pool: "hsn0", Index: 9, Node: "n2", Expires: at.Add(time.Minute), Reported: at, Open: true}, 0),
	}
}

// TestExportImportRoundTrip: a store exported and imported into an empty
// one holds the same records (versions start again at 1); importing again
// writes nothing; a target holding a different record refuses.
func TestExportImportRoundTrip(t *testing.T) {
	ctx := t.Context()
	src := openSQLite(t)
	if err := src.Commit(ctx, sampleOps()); err != nil {
		t.Fatal(err)
	}
	// Versions of the source differ from the fresh target's.
	if err := src.Commit(ctx, []store.Op{store.Put(&store.Meta{Key: "vni-cursor", Value: "1503"}, 1)}); err != nil {
		t.Fatal(err)
	}
	var doc bytes.Buffer
	if err := store.Export(ctx, src, &doc); err != nil {
		t.Fatal(err)
	}
	dst := openSQLite(t)
	res, err := store.Import(ctx, dst, bytes.NewReader(doc.Bytes()), 2)
	if err != nil || res.Written != 6 || res.Present != 0 {
		t.Fatalf("import: %+v, %v", res, err)
	}
	want, _ := src.Load(ctx)
	got, _ := dst.Load(ctx)
	if d := cmp.Diff(store.ExportState(want), store.ExportState(got)); d != "" {
		t.Fatalf("imported state (-want +got):\n%s", d)
	}
	if res, err := store.Import(ctx, dst, bytes.NewReader(doc.Bytes()), 0); err != nil || res.Written != 0 || res.Present != 6 {
		t.Fatalf("second import: %+v, %v", res, err)
	}
	changed := strings.Replace(doc.String(), `"value": "1503"`, `"value": "9"`, 1)
	if _, err := store.Import(ctx, dst, strings.NewReader(changed), 0); !errors.Is(err, store.ErrImportConflict) {
		t.Fatalf("import over a different record: %v, want ErrImportConflict", err)
	}
	// A slice the target holds closed is not the one the document holds open.
	closed := strings.Replace(doc.String(), `"open": true`, `"open": false`, 1)
	if closed == doc.String() {
		t.Fatal("export does not write the open slice's open")
	}
	if _, err := store.Import(ctx, dst, strings.NewReader(closed), 0); !errors.Is(err, store.ErrImportConflict) {
		t.Fatalf("import of the slice closed over it open: %v, want ErrImportConflict", err)
	}
}

func TestDecodeExportRefuses(t *testing.T) {
	head := `{"kind":"SlingshotControllerState","version":1,`
	for _, in := range []string{
		``, `[]`, `{"kind":"Other","version":1}`, `{"kind":"SlingshotControllerState","version":2}`,
		head + `"unknown":1}`,
		head + `"leases":[{"key":"job/a/b","vni":5},{"key":"job/a/b","vni":6}]}`,
		head + `"leases":[{"key":"job/a/b","vni":5},{"key":"job/a/c","vni":5}]}`,
		head + `"leases":[{"key":"","vni":5}]}`,
		head + `"leases":[{"key":"job/a/b","vni":70000}]}`,
		head + `"quarantine":[{"vni":0}]}`,
		head + `"slices":[{"pool":"p","index":-1}]}`,
		head + `"slices":[{"pool":"p","index":1},{"pool":"p","index":1}]}`,
		head + `"meta":[{"key":""}]}`,
	} {
		if _, err := store.DecodeExport(strings.NewReader(in)); !errors.Is(err, store.ErrBadExport) {
			t.Errorf("DecodeExport(%s) = %v, want ErrBadExport", in, err)
		}
	}
}

// FuzzDecodeExport: no document panics the decoder, and an accepted one
// imports into an empty store.
func FuzzDecodeExport(f *testing.F) {
	f.Add([]byte(`{"kind":"SlingshotControllerState","version":1,"meta":[{"key":"vni-cursor","value":"7"}],"leases":[{"key":"job/ns/u","vni":1500,"scope":"job","owner":{"Kind":"Job"},"nodes":["n1"],"created":"2024-01-01T00:00:00Z"}],"quarantine":[{"vni":9,"released":"2024-01-01T00:00:00Z"}],"slices":[{"pool":"pod-vni","index":1,"node":"n","expires":"2024-01-01T00:00:00Z","allocated":1,"reported":"2024-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"kind":"SlingshotControllerState","version":1}`))
	f.Add([]byte(`{"kind":"SlingshotControllerState","version":1,"leases":[{"key":"a","vni":1},{"key":"b","vni":1}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		doc, err := store.DecodeExport(bytes.NewReader(in))
		if err != nil {
			return
		}
		st := openSQLite(t)
		if _, err := store.Import(t.Context(), st, bytes.NewReader(in), 0); err != nil {
			// sqlite refuses VNIs outside 1-65535 only; DecodeExport already did.
			t.Fatalf("accepted document %s does not import: %v", in, err)
		}
		if got, _ := st.Load(t.Context()); len(got.Leases) != len(doc.Leases) {
			t.Fatalf("imported %d leases of %d", len(got.Leases), len(doc.Leases))
		}
	})
}

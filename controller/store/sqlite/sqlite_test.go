package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(ctx context.Context, t *testing.T, dir string) store.Store {
		s, err := Open(ctx, filepath.Join(dir, "c.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestRefusesNewerSchema(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(t.Context(), p); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open: %v, want ErrSchemaTooNew", err)
	}
}

func TestWALAndFullSync(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode string
	var sync int
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := s.db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
}

func BenchmarkCommitOneLease(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "c.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := store.Lease{Key: "job/ns/x", VNI: 2000, Scope: store.ScopeJob, Nodes: []string{"n1"}}
	mustPut := func(v uint64) {
		if err := s.Commit(b.Context(), []store.Op{store.Put(&l, v)}); err != nil {
			b.Fatal(err)
		}
	}
	mustPut(0)
	v := uint64(1)
	for b.Loop() {
		mustPut(v)
		v++
	}
}

// A path is a path: characters that mean something in an SQLite URI
// name the file they spell, and the pragmas still apply.
func TestOpenPathWithURICharacters(t *testing.T) {
	for _, name := range []string{"a?b.db", "a#b.db", "100%.db", "%3f.db", "plain.db"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, name)
			s, err := Open(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			var mode string
			err = s.db.QueryRow("PRAGMA journal_mode").Scan(&mode)
			s.Close()
			if err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Contains(names, name) || len(names) != 1 {
				t.Errorf("files in the directory: %q, want only %q", names, name)
			}
		})
	}
}

// A database of schema v1 (before slices had Open) migrates in place: its
// slices load closed, as v1 kept them, and can be reported open after.
func TestMigratesV1Slices(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.db")
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{migrations[0], "PRAGMA user_version = 1",
		"INSERT INTO node_slices (pool, idx, node, expires_ms, allocated, reported_ms, version) VALUES ('hsn0', 2, 'n1', 5000, 3, 4000, 4)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Slices) != 1 || st.Slices[0].Open || st.Slices[0].Allocated != 3 || st.Slices[0].Version != 4 {
		t.Fatalf("v1 slice after migration: %+v", st.Slices)
	}
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, SchemaVersion)
	}
	sl := st.Slices[0]
	sl.Open = true
	if err := s.Commit(t.Context(), []store.Op{store.Put(&sl, sl.Version)}); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Load(t.Context()); err != nil || !st.Slices[0].Open {
		t.Fatalf("after reporting open: %+v %v", st.Slices, err)
	}
}

// A database of schema v2 (before leases had HWCollJob) migrates in
// place: its leases load with no hardware-collectives reservation.
func TestMigratesV2Leases(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.db")
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{migrations[0], migrations[1], "PRAGMA user_version = 2",
		`INSERT INTO vni_leases (key, vni, scope, owner_api_version, owner_kind, owner_namespace, owner_name, owner_uid, nodes, owner_gone, created_ms, version)
		 VALUES ('job/ns/u1', 1500, 'job', 'batch/v1', 'Job', 'ns', 'train', 'u1', 'n1', 0, 1000, 3)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 1 || st.Leases[0].HWCollJob != "" || st.Leases[0].Version != 3 {
		t.Fatalf("v2 lease after migration: %+v", st.Leases)
	}
	l := st.Leases[0]
	l.HWCollJob = "k8s-u1"
	if err := s.Commit(t.Context(), []store.Op{store.Put(&l, l.Version)}); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Load(t.Context()); err != nil || st.Leases[0].HWCollJob != "k8s-u1" {
		t.Fatalf("after writing HWCollJob: %+v, %v", st, err)
	}
}

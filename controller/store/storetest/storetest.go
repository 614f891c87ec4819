package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

// Opener opens the backend's store over dir; opening the same dir again
// must see what was committed before.
type Opener func(ctx context.Context, t *testing.T, dir string) store.Store

// Run runs the conformance suite against the backend.
func Run(t *testing.T, open Opener) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, open) })
	t.Run("Versions", func(t *testing.T) { testVersions(t, open) })
	t.Run("AtomicBatch", func(t *testing.T) { testAtomicBatch(t, open) })
}

func ts(sec int64) time.Time { return time.UnixMilli(sec * 1000) }

func sample() (store.Lease, store.Quarantine, store.Slice, store.Meta) {
	return store.Lease{
			Key: "job/ns1/u1", VNI: 1500, Scope: store.ScopeJob,
			Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ns1", Name: "train", UID: "u1"},
			Nodes: []string{"n1", "n2"}, Created: ts(100), HWCollJob: "k8s-u1",
		}, store.Quarantine{VNI: 1499, Released: ts(90)},
		store.Slice{Pool: "pod-vni", Index: 3, Node: "n1", Expires: ts(200), Allocated: 2, Reported: ts(150), Open: true},
		store.Meta{Key: "config", Value: `{"range":"1024-65535"}`}
}

func mustCommit(ctx context.Context, t *testing.T, s store.Store, ops ...store.Op) {
	t.Helper()
	if err := s.Commit(ctx, ops); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func testRoundTrip(t *testing.T, open Opener) {
	ctx := t.Context()
	dir := t.TempDir()
	s := open(ctx, t, dir)
	l, q, sl, m := sample()
	// A second slice, closed and empty: Open and Allocated round-trip
	// both ways.
	closed := store.Slice{Pool: "hsn0", Index: 7, Node: "n2", Expires: ts(300), Reported: ts(250)}
	mustCommit(ctx, t, s, store.Put(&l, 0), store.Put(&q, 0), store.Put(&sl, 0), store.Put(&closed, 0), store.Put(&m, 0))
	l.Version, q.Version, sl.Version, closed.Version, m.Version = 1, 1, 1, 1, 1
	want := &store.State{Meta: []store.Meta{m}, Leases: []store.Lease{l}, Quarantine: []store.Quarantine{q}, Slices: []store.Slice{closed, sl}}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Load after commit (-want +got):\n%s", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(ctx, t, dir)
	defer s.Close()
	got, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Load after reopen (-want +got):\n%s", d)
	}
}

func testVersions(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(ctx, t, t.TempDir())
	defer s.Close()
	l, _, _, _ := sample()
	mustCommit(ctx, t, s, store.Put(&l, 0))
	tests := []struct {
		name string
		op   store.Op
	}{
		{"create existing", store.Put(&l, 0)},
		{"stale update", store.Put(&l, 7)},
		{"stale delete", store.Delete(&l, 2)},
		{"delete missing", store.Delete(&store.Quarantine{VNI: 5}, 1)},
		{"update missing", store.Put(&store.Slice{Pool: "p", Index: 1}, 1)},
	}
	for _, tt := range tests {
		if err := s.Commit(ctx, []store.Op{tt.op}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: err = %v, want ErrConflict", tt.name, err)
		}
	}
	l.Nodes = []string{"n3"}
	mustCommit(ctx, t, s, store.Put(&l, 1), store.Put(&l, 2))
	st, _ := s.Load(ctx)
	if len(st.Leases) != 1 || st.Leases[0].Version != 3 || st.Leases[0].Nodes[0] != "n3" {
		t.Fatalf("after two chained puts: %+v", st.Leases)
	}
	mustCommit(ctx, t, s, store.Delete(&l, 3))
	if st, _ := s.Load(ctx); len(st.Leases) != 0 {
		t.Fatalf("lease not deleted: %+v", st.Leases)
	}
}

func testAtomicBatch(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(ctx, t, t.TempDir())
	defer s.Close()
	l, q, _, _ := sample()
	dup := l
	dup.Key = "job/ns1/other" // same VNI as l: a backend must refuse two leases of one VNI
	if err := s.Commit(ctx, []store.Op{store.Put(&q, 0), store.Put(&l, 0), store.Put(&dup, 0)}); err == nil {
		t.Fatal("two leases of one VNI committed")
	}
	if err := s.Commit(ctx, []store.Op{store.Put(&q, 0), store.Put(&l, 5)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases)+len(st.Quarantine) != 0 {
		t.Fatalf("failed batches left records: %+v", st)
	}
}

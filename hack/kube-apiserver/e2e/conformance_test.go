package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/controller/store/storetest"
)

// TestConformance runs the store conformance suite (the one the sqlite
// store passes) on the Kubernetes store: one namespace per directory the
// suite hands out, so reopening a directory finds what it committed.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(ctx context.Context, t *testing.T, dir string) store.Store {
		h := sha256.Sum256([]byte(dir))
		return openKube(t, ensureNamespace(t, "conf-"+hex.EncodeToString(h[:6])), "conformance")
	})
}

func lease(key string, vni uint16, nodes ...string) *store.Lease {
	return &store.Lease{Key: key, VNI: vni, Scope: store.ScopeJob, Nodes: nodes,
		Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ns", Name: "j", UID: "u"}}
}

// TestFenceStopsAStaleWriter: a second writer's Load fences the first, whose
// next commit fails before it writes anything, and whose lease would have
// duplicated the second writer's VNI.
func TestFenceStopsAStaleWriter(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "fence")
	a, b := openKube(t, ns, "a"), openKube(t, ns, "b")
	if _, err := a.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx, []store.Op{store.Put(lease("job/ns/a1", 2000), 0)}); err != nil {
		t.Fatal(err)
	}
	st, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 1 {
		t.Fatalf("b loaded %d leases, want 1", len(st.Leases))
	}
	if err := b.Commit(ctx, []store.Op{store.Put(lease("job/ns/b1", 2001), 0)}); err != nil {
		t.Fatal(err)
	}
	// a still believes it leads and hands out 2001 again.
	err = a.Commit(ctx, []store.Op{store.Put(lease("job/ns/a2", 2001), 0)})
	if !errors.Is(err, kube.ErrFenced) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale writer's commit: %v, want ErrFenced and ErrConflict", err)
	}
	if err := a.Commit(ctx, []store.Op{store.Put(lease("job/ns/a3", 2002), 0)}); !errors.Is(err, kube.ErrNeedsLoad) {
		t.Fatalf("commit after a fenced one: %v, want ErrNeedsLoad", err)
	}
	st, err = openKube(t, ns, "c").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint16{}
	for _, l := range st.Leases {
		got[l.Key] = l.VNI
	}
	if len(got) != 2 || got["job/ns/a1"] != 2000 || got["job/ns/b1"] != 2001 {
		t.Fatalf("leases after the fenced commit: %v", got)
	}
}

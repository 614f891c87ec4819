package controller

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// BenchmarkAcquireAtLiveLeases measures one durable acquire (a new
// pod-scoped lease) and its release at 1,000 and at 60,000 live leases;
// the allocator's search is O(log64 n), so both should cost the same
// within noise (the fsync of the commit dominates).
func BenchmarkAcquireAtLiveLeases(b *testing.B) {
	for _, live := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "c.db")
			st, err := sqlite.Open(b.Context(), path)
			if err != nil {
				b.Fatal(err)
			}
			// Preload the live leases in one transaction, then let the
			// service load them as after a restart.
			ops := make([]store.Op, 0, live)
			for i := range live {
				l := &store.Lease{Key: fmt.Sprintf("job/pre/u%d", i), VNI: uint16(1024 + i + i/9000), Scope: store.ScopeJob,
					Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "pre", Name: fmt.Sprintf("j%d", i), UID: fmt.Sprintf("u%d", i)},
					Nodes: []string{"n1"}, Created: time.Now()}
				if l.VNI == 1024+10 || l.VNI < 1024 {
					continue
				}
				ops = append(ops, store.Put(l, 0))
			}
			if err := st.Commit(b.Context(), ops); err != nil {
				b.Fatal(err)
			}
			st.Close()
			svc, _ := start(b, path, nil, Config{Quarantine: -1})
			ctx := b.Context()
			i := 0
			for b.Loop() {
				i++
				l, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "bench", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprintf("u%d", i)}, "n1")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := svc.ReleaseJobVNI(ctx, l.Key, "n1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

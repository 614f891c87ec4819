package e2e

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
)

var (
	scaleNodes  = flag.Int("scale.nodes", 5000, "nodes whose slices (one pod-VNI slice and one IP slice each) the scale tests seed")
	scaleLeases = flag.Int("scale.leases", 20000, "live VNI leases the scale tests seed")
)

// The pool of a seeded store: every node holds two slices of hsn0 (as
// many objects as a pod-VNI slice and an IP slice each, without a pod VNI
// range, which would turn the failover test's pod-scoped acquires into
// node-local ones).
func scaleFlags(int) []string { return []string{"--ip-pools", "hsn0=10.0.0.0/8:/24"} }

// scaleLease is seeded lease i: a pod's VNI, held by one node.
func scaleLease(i, nodes int) *store.Lease {
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	return &store.Lease{Key: "pod/seed/" + uid, VNI: uint16(1024 + i), Scope: store.ScopePod,
		Owner: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: "seed", Name: fmt.Sprintf("seed-%06d", i), UID: uid},
		Nodes: []string{nodeName(i % nodes)}, Created: time.UnixMilli(1_700_000_000_000), Version: 1}
}

// seedStore writes nodes' slices and leases live leases into the store in
// namespace ns, in batches of a thousand, as one writer would have.
func seedStore(t *testing.T, ns string, nodes, leases int) {
	t.Helper()
	if 1024+leases > 60000 || 2*nodes > 65536 {
		t.Fatalf("%d leases or %d nodes' slices do not fit the VNI range or the pool", leases, nodes)
	}
	st := openKube(t, ns, "seed")
	if _, err := st.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	var ops []store.Op
	flush := func() {
		if err := st.Commit(t.Context(), ops); err != nil {
			t.Fatalf("seed: %v", err)
		}
		ops = ops[:0]
	}
	exp := time.Now().Add(time.Hour)
	for n := range nodes {
		for i := range 2 {
			ops = append(ops, store.Put(&store.Slice{Pool: "hsn0", Index: 2*n + i, Node: nodeName(n), Expires: exp, Open: true, Version: 1}, 0))
		}
		if len(ops) >= 1000 {
			flush()
		}
	}
	for i := range leases {
		ops = append(ops, store.Put(scaleLease(i, nodes), 0))
		if len(ops) >= 1000 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}

// TestStoreLoadAtScale seeds -scale.nodes nodes' slices and -scale.leases
// leases and times a new leader's Load of them: cold (a full list, as
// without a standby) and warm (a store that has followed the objects
// since before the last writer's changes), each with the store's own
// breakdown in its log line. The warm load must return exactly what a
// cold load then returns; it prints the follower's heap.
func TestStoreLoadAtScale(t *testing.T) {
	nodes, leases := *scaleNodes, *scaleLeases
	ns := newNamespace(t, "scale")
	start := time.Now()
	seedStore(t, ns, nodes, leases)
	t.Logf("seeded %d slices and %d leases in %v", 2*nodes, leases, time.Since(start).Round(time.Millisecond))
	open := func(id string) *kube.Store {
		st, err := kube.New(srv.Config, kube.Options{Namespace: ns, Identity: id, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	load := func(st *kube.Store) (*store.State, time.Duration) {
		t0 := time.Now()
		got, err := st.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return got, time.Since(t0)
	}
	_, cold := load(open("cold"))

	// The standby follows from here on; its heap is what the copy costs.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	standby := open("standby")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- standby.Follow(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, 2*time.Minute, "standby synced", func() (bool, string) { return standby.Synced(), "not synced" })
	runtime.GC()
	runtime.ReadMemStats(&after)

	// A leader's changes while the standby follows: slices renewed with
	// new counts, leases freed and new ones made.
	writer := open("writer")
	state, _ := load(writer)
	var ops []store.Op
	for i, sl := range state.Slices[:500] {
		next := sl
		next.Allocated, next.Version = i+1, sl.Version+1
		ops = append(ops, store.Put(&next, sl.Version))
	}
	for _, l := range state.Leases[:250] {
		ops = append(ops, store.Delete(&l, l.Version))
	}
	for i := range 250 {
		l := scaleLease(leases+i, nodes)
		ops = append(ops, store.Put(l, 0))
	}
	if err := writer.Commit(t.Context(), ops); err != nil {
		t.Fatal(err)
	}

	warmState, warm := load(standby)
	coldState, _ := load(open("check"))
	if !reflect.DeepEqual(warmState, coldState) {
		t.Errorf("the standby's load differs from a list's: %d/%d leases, %d/%d slices, %d/%d quarantined",
			len(warmState.Leases), len(coldState.Leases), len(warmState.Slices), len(coldState.Slices),
			len(warmState.Quarantine), len(coldState.Quarantine))
	}
	if len(warmState.Leases) != leases || len(warmState.Slices) != 2*nodes {
		t.Errorf("loaded %d leases and %d slices, want %d and %d", len(warmState.Leases), len(warmState.Slices), leases, 2*nodes)
	}
	t.Logf("load of %d slices and %d leases: cold (full list) %v, warm (standby) %v; standby heap %.1f MiB",
		2*nodes, leases, cold.Round(time.Millisecond), warm.Round(time.Millisecond),
		float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
}

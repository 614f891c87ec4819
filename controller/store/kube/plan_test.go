package kube

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

func lease(key string, vni uint16) *store.Lease {
	return &store.Lease{Key: key, VNI: vni, Scope: store.ScopeJob}
}

// cached is a state holding one lease (vni 2000 at version 3) and one
// meta value.
func cached() state {
	return state{
		entries: map[string]entry{"lease/job/ns/a": {res: resLease, name: "vni-a", version: 3, rv: "rv-a", vni: 2000}},
		vnis:    map[uint16]string{2000: "lease/job/ns/a"},
		meta:    map[string]metaValue{"vni-cursor": {Value: "2000", Version: 4}},
	}
}

func TestPlanFoldsChainsIntoOneWrite(t *testing.T) {
	a := lease("job/ns/a", 2000)
	a.Nodes = []string{"n1"}
	a2 := lease("job/ns/a", 2000)
	a2.Nodes = []string{"n1", "n2"}
	tests := []struct {
		name string
		ops  []store.Op
		want []write
	}{
		{"chained updates", []store.Op{store.Put(a, 3), store.Put(a2, 4)},
			[]write{{key: "lease/job/ns/a", res: resLease, name: "vni-a", from: 3, fromRV: "rv-a", rec: withVersion(a2, 5)}}},
		{"create", []store.Op{store.Put(lease("job/ns/b", 2001), 0)},
			[]write{{key: "lease/job/ns/b", res: resLease, name: "vni-h-" + hashOf("job/ns/b"), rec: withVersion(lease("job/ns/b", 2001), 1)}}},
		{"created and deleted in the batch", []store.Op{store.Put(lease("job/ns/b", 2001), 0), store.Delete(lease("job/ns/b", 2001), 1)}, nil},
		{"delete then create again", []store.Op{store.Delete(a, 3), store.Put(lease("job/ns/a", 2002), 0)},
			[]write{{key: "lease/job/ns/a", res: resLease, name: "vni-a", from: 3, fromRV: "rv-a", rec: withVersion(lease("job/ns/a", 2002), 1)}}},
		{"freed vni leased again in the batch", []store.Op{store.Delete(a, 3), store.Put(lease("job/ns/b", 2000), 0)},
			[]write{{key: "lease/job/ns/a", res: resLease, name: "vni-a", from: 3, fromRV: "rv-a"},
				{key: "lease/job/ns/b", res: resLease, name: "vni-h-" + hashOf("job/ns/b"), rec: withVersion(lease("job/ns/b", 2000), 1)}}},
		{"quarantine and slice", []store.Op{store.Put(&store.Quarantine{VNI: 7}, 0), store.Put(&store.Slice{Pool: "pod-vni", Index: 3, Node: "n"}, 0)},
			[]write{{key: "quarantine/7", res: resQuarantine, name: "vni-7", rec: &store.Quarantine{VNI: 7, Version: 1}},
				{key: "slice/pod-vni/3", res: resSlice, name: "pod-vni-3", rec: &store.Slice{Pool: "pod-vni", Index: 3, Node: "n", Version: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := planBatch(cached(), tt.ops)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, p.writes, cmp.AllowUnexported(write{})); d != "" {
				t.Fatalf("writes (-want +got):\n%s", d)
			}
			if p.metaChanged {
				t.Fatal("meta changed without a meta op")
			}
		})
	}
}

func withVersion(l *store.Lease, v uint64) *store.Lease {
	c := *l
	c.Version = v
	return &c
}

func hashOf(key string) string { return strings.TrimPrefix(LeaseName(key), "vni-h-") }

func TestPlanRefuses(t *testing.T) {
	a := lease("job/ns/a", 2000)
	tests := []struct {
		name string
		ops  []store.Op
		want error
	}{
		{"create existing", []store.Op{store.Put(a, 0)}, store.ErrConflict},
		{"stale update", []store.Op{store.Put(a, 2)}, store.ErrConflict},
		{"stale delete", []store.Op{store.Delete(a, 4)}, store.ErrConflict},
		{"update missing", []store.Op{store.Put(lease("job/ns/x", 9), 1)}, store.ErrConflict},
		{"broken chain", []store.Op{store.Put(a, 3), store.Put(a, 3)}, store.ErrConflict},
		{"stale meta", []store.Op{store.Put(&store.Meta{Key: "vni-cursor", Value: "1"}, 3)}, store.ErrConflict},
		{"new meta over old", []store.Op{store.Put(&store.Meta{Key: "vni-cursor", Value: "1"}, 0)}, store.ErrConflict},
		{"vni of another lease", []store.Op{store.Put(lease("job/ns/b", 2000), 0)}, ErrDuplicateVNI},
		{"two new leases of one vni", []store.Op{store.Put(lease("job/ns/b", 7), 0), store.Put(lease("job/ns/c", 7), 0)}, ErrDuplicateVNI},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := planBatch(cached(), tt.ops); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	for _, op := range []store.Op{
		{Kind: store.OpPut},
		{Kind: 9, Record: a},
		store.Delete(a, 0),
		store.Put(lease("", 5), 0),
		store.Put(lease("job/ns/z", 0), 0),
		store.Put(&store.Slice{Pool: "p", Index: -1}, 0),
		store.Put(&store.Quarantine{}, 0),
		store.Put(&store.Meta{}, 0),
	} {
		if _, err := planBatch(cached(), []store.Op{op}); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("op %+v: err = %v, want a malformed-op error", op, err)
		}
	}
}

func TestPlanMeta(t *testing.T) {
	p, err := planBatch(cached(), []store.Op{
		store.Put(&store.Meta{Key: "vni-cursor", Value: "2001"}, 4),
		store.Put(&store.Meta{Key: "vni-range", Value: "1024-65535"}, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]metaValue{"vni-cursor": {Value: "2001", Version: 5}, "vni-range": {Value: "1024-65535", Version: 1}}
	if d := cmp.Diff(want, p.meta); d != "" || !p.metaChanged || len(p.writes) != 0 {
		t.Fatalf("meta (-want +got):\n%s (changed %v, writes %d)", d, p.metaChanged, len(p.writes))
	}
	if c := cached(); c.meta["vni-cursor"].Version != 4 {
		t.Fatal("planning changed the cache")
	}
}

func TestLeaseName(t *testing.T) {
	// UIDs are unique across all objects, so a job's and a pod's never meet.
	uid, podUID := "6f1c2d4e-8a9b-4c3d-9e2f-1a2b3c4d5e6f", "0b0b2d4e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"
	tests := []struct{ key, want string }{
		{"job/ns/" + uid, "vni-" + uid},
		{"pod/ns/" + podUID, "vni-" + podUID},
		{"claim/ns/shared", "vni-claim-ns.shared"},
		{"claim/team-a/ring.0", "vni-claim-team-a.ring.0"},
		{"pod/ns/web-0", "vni-h-" + hashOf("pod/ns/web-0")},
		{"job/ns/Not_A_UID", "vni-h-" + hashOf("job/ns/Not_A_UID")},
		{"claim/ns/" + strings.Repeat("x", 250), "vni-h-" + hashOf("claim/ns/"+strings.Repeat("x", 250))},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := LeaseName(tt.key)
		if got != tt.want {
			t.Errorf("LeaseName(%q) = %q, want %q", tt.key, got, tt.want)
		}
		if len(got) > 253 {
			t.Errorf("LeaseName(%q) is %d characters", tt.key, len(got))
		}
		if other, ok := seen[got]; ok {
			t.Errorf("keys %q and %q share the name %q", other, tt.key, got)
		}
		seen[got] = tt.key
	}
}

func TestWALRoundTripAndChunks(t *testing.T) {
	var ops []walOp
	for i := range 300 {
		l := lease("job/ns/"+strings.Repeat("k", i%40), uint16(1024+i))
		l.Version = 1
		ops = append(ops, walOp{Res: resLease, Name: LeaseName(l.Key), Lease: l})
	}
	ops = append(ops, walOp{Res: resQuarantine, Name: "vni-9", From: 2})
	chunks, err := encodeWAL(ops, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 5 {
		t.Fatalf("%d chunks of at most 4 KiB for 301 ops, want several", len(chunks))
	}
	var got []walOp
	for _, c := range chunks {
		if len(c) > 4096 {
			t.Fatalf("chunk of %d bytes over the 4096 limit", len(c))
		}
		o, err := DecodeWAL(c)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o...)
	}
	if d := cmp.Diff(ops, got); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
}

func TestDecodeWALRefuses(t *testing.T) {
	for _, in := range []string{
		``, `{}`, `[{"res":"vnileases"}]`,
		`[{"res":"pods","name":"x","from":1}]`,
		`[{"res":"vnileases","name":"x","from":0}]`,
		`[{"res":"vnileases","name":"x","lease":{"Key":"job/a/b","VNI":5,"Version":1},"slice":{"Pool":"p","Version":1}}]`,
		`[{"res":"nodeslices","name":"x","lease":{"Key":"job/a/b","VNI":5,"Version":1}}]`,
		`[{"res":"vnileases","name":"x","lease":{"Key":"job/a/b","VNI":5,"Version":0}}]`,
		`[{"res":"vnileases","name":"x","lease":{"Key":"job/a/b","VNI":0,"Version":1}}]`,
	} {
		if _, err := DecodeWAL(in); !errors.Is(err, ErrBadObject) {
			t.Errorf("DecodeWAL(%s) = %v, want ErrBadObject", in, err)
		}
	}
}

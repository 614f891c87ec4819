package controller

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// countingStore counts the slice records committed to the store beneath.
type countingStore struct {
	store.Store
	mu     sync.Mutex
	slices int
}

func (c *countingStore) Commit(ctx context.Context, ops []store.Op) error {
	c.mu.Lock()
	for _, op := range ops {
		if _, ok := op.Record.(*store.Slice); ok {
			c.slices++
		}
	}
	c.mu.Unlock()
	return c.Store.Commit(ctx, ops)
}

func (c *countingStore) sliceWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slices
}

// startCounting runs an Allocator over a counting sqlite store at path.
func startCounting(t *testing.T, path string, nodes NodeDirectory, cfg Config) (*Allocator, *countingStore, func()) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st}
	svc, stop := startStore(t, cs, nil, nodes, cfg)
	return svc, cs, stop
}

// Issue 25: a heartbeat that changes nothing reclaim reads is answered from
// memory and writes nothing, however long the node keeps heartbeating; a
// report is written only when it changes whether anything is allocated or
// whether the slice is open.
func TestQuietHeartbeatsWriteNothing(t *testing.T) {
	tests := []struct {
		name string
		// reports are the node's successive reports of its one slice,
		// each sent as the heartbeats of ten minutes.
		reports []SliceUsage
		writes  int
	}{
		{name: "never reports", reports: nil, writes: 0},
		{name: "open, nothing allocated, as leased", reports: []SliceUsage{{Open: true}}, writes: 0},
		{name: "open, the count moving", reports: []SliceUsage{{Open: true, Allocated: 3}, {Open: true, Allocated: 7}, {Open: true, Allocated: 1}}, writes: 1},
		{name: "closed and empty", reports: []SliceUsage{{}}, writes: 1},
		{name: "empty, used, empty", reports: []SliceUsage{{Open: true}, {Open: true, Allocated: 2}, {Open: true}}, writes: 2},
		{name: "open, closed, open", reports: []SliceUsage{{Open: true, Allocated: 4}, {Allocated: 4}, {Open: true, Allocated: 5}}, writes: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			clock := newClock()
			cfg := ipConfig("10.150.0.0/16")
			cfg.Now = clock.Now
			svc, cs, _ := startCounting(t, filepath.Join(t.TempDir(), "c.db"), nil, cfg)
			a, err := svc.AcquireSlices(ctx, "node-a", "hsn0", 1)
			if err != nil || len(a) != 1 {
				t.Fatalf("acquire: %+v %v", a, err)
			}
			before := cs.sliceWrites()
			reports := tc.reports
			if reports == nil {
				reports = []SliceUsage{{}}
			}
			for _, u := range reports {
				u.Pool, u.Index = "hsn0", a[0].Index
				usage := []SliceUsage{u}
				if tc.reports == nil {
					usage = nil
				}
				// Ten minutes of heartbeats every 10 s, ten TTLs.
				for range 60 {
					clock.Advance(10 * time.Second)
					held, lost, err := svc.RenewSlices(ctx, "node-a", usage)
					if err != nil || len(held) != 1 || len(lost) != 0 {
						t.Fatalf("renew: held %+v lost %+v %v", held, lost, err)
					}
					if want := clock.Now().Add(time.Minute); !held[0].Expires.Equal(want) {
						t.Fatalf("renewed until %v, want %v", held[0].Expires, want)
					}
					if tc.reports != nil && (held[0].Allocated != u.Allocated || held[0].Open != u.Open) {
						t.Fatalf("renewal answered %+v after report %+v", held[0], u)
					}
				}
			}
			if got := cs.sliceWrites() - before; got != tc.writes {
				t.Fatalf("%d slice writes for %d heartbeats, want %d", got, 60*len(reports), tc.writes)
			}
		})
	}
}

// Issue 25: renewals are not stored, so a new leader cannot know when a
// node last renewed; it grants every slice a full TTL from its takeover,
// and reclaims a silent node's slice only a TTL plus the grace period
// after it, however old the stored lease is. What reclaim reads of the
// usage (something allocated) survives the takeover though its count was
// never written.
func TestNewLeaderGrantsFullTTL(t *testing.T) {
	const ttl, grace = time.Minute, 5 * time.Minute
	tests := []struct {
		name string
		// report is node-a's last report before the takeover.
		report SliceUsage
		// deleted: node-a's Node object is deleted at the takeover.
		deleted bool
		// reclaimed: the slice is reclaimed when it is due (see below).
		reclaimed bool
	}{
		{name: "silent, closed and empty", report: SliceUsage{}, reclaimed: true},
		{name: "silent, open", report: SliceUsage{Open: true}, reclaimed: false},
		{name: "silent, addresses allocated", report: SliceUsage{Allocated: 5}, reclaimed: false},
		{name: "deleted, addresses allocated", report: SliceUsage{Allocated: 5, Open: true}, deleted: true, reclaimed: false},
		{name: "deleted, empty", report: SliceUsage{Open: true}, deleted: true, reclaimed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			clock := newClock()
			cfg := ipConfig("10.150.0.0/16")
			cfg.Now, cfg.SliceTTL, cfg.SliceGrace = clock.Now, ttl, grace
			path := filepath.Join(t.TempDir(), "c.db")
			nodes := &deletedNodes{since: map[string]time.Time{}}
			old, _, stopOld := startCounting(t, path, nodes, cfg)
			a, err := old.AcquireSlices(ctx, "node-a", "hsn0", 1)
			if err != nil || len(a) != 1 {
				t.Fatalf("acquire: %+v %v", a, err)
			}
			u := tc.report
			u.Pool, u.Index = "hsn0", a[0].Index
			// The count moves on every heartbeat for an hour: never
			// written, as reclaim only reads whether it is zero.
			for i := range 360 {
				if u.Allocated != 0 {
					u.Allocated = 1 + i%9
				}
				clock.Advance(10 * time.Second)
				if _, _, err := old.RenewSlices(ctx, "node-a", []SliceUsage{u}); err != nil {
					t.Fatal(err)
				}
			}
			stopOld()

			// The new leader takes over a moment after node-a's last
			// renewal, an hour after anything of node-a was stored.
			clock.Advance(time.Second)
			takeover := clock.Now()
			if tc.deleted {
				nodes.del("node-a", takeover)
			}
			svc, _, _ := startCounting(t, path, nodes, cfg)
			if got, _, err := svc.ListSlices("hsn0", "node-a"); err != nil || len(got) != 1 || !got[0].Expires.Equal(takeover.Add(ttl)) {
				t.Fatalf("after takeover: %+v %v; want the slice to expire a TTL after the takeover", got, err)
			}
			// A silent node's slice is due a TTL and the grace period after
			// the takeover; a deleted node's the grace period after its
			// deletion, whatever its lease.
			due := ttl + grace
			if tc.deleted {
				due = grace
			}
			clock.Advance(due - time.Second)
			if r, err := svc.sweep(ctx); err != nil || r.Reclaimed != 0 {
				t.Fatalf("sweep %v after the takeover: %+v %v; want nothing reclaimed", due-time.Second, r, err)
			}
			clock.Advance(time.Second)
			r, err := svc.sweep(ctx)
			if err != nil || (r.Reclaimed == 1) != tc.reclaimed || r.Reclaimed+r.Stranded != 1 {
				t.Fatalf("sweep %v after the takeover: %+v %v; want reclaimed %v", due, r, err, tc.reclaimed)
			}
			held, _, err := svc.ListSlices("hsn0", "node-a")
			if err != nil || (len(held) == 0) != tc.reclaimed {
				t.Fatalf("node-a holds %+v (%v); want reclaimed %v", held, err, tc.reclaimed)
			}
		})
	}
}

// A node that keeps heartbeating to the new leader keeps its slice,
// however long, with nothing written.
func TestNewLeaderKeepsRenewedSlice(t *testing.T) {
	ctx := t.Context()
	clock := newClock()
	cfg := ipConfig("10.150.0.0/16")
	cfg.Now = clock.Now
	path := filepath.Join(t.TempDir(), "c.db")
	old, _, stopOld := startCounting(t, path, nil, cfg)
	a, err := old.AcquireSlices(ctx, "node-a", "hsn0", 1)
	if err != nil || len(a) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	usage := []SliceUsage{{Pool: "hsn0", Index: a[0].Index}}
	if _, _, err := old.RenewSlices(ctx, "node-a", usage); err != nil {
		t.Fatal(err)
	}
	stopOld()
	svc, cs, _ := startCounting(t, path, nil, cfg)
	before := cs.sliceWrites()
	for range 360 {
		clock.Advance(10 * time.Second)
		if _, lost, err := svc.RenewSlices(ctx, "node-a", usage); err != nil || len(lost) != 0 {
			t.Fatalf("renew: lost %+v %v", lost, err)
		}
		if r, err := svc.sweep(ctx); err != nil || r.Reclaimed != 0 {
			t.Fatalf("sweep reclaimed a renewed slice: %+v %v", r, err)
		}
	}
	if got := cs.sliceWrites() - before; got != 0 {
		t.Fatalf("%d slice writes for an hour of quiet heartbeats", got)
	}
}

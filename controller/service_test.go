package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// clock is a manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeResolver resolves pods from a table and tracks which owners exist.
type fakeResolver struct {
	mu     sync.Mutex
	pods   map[string]Resolution // ns/name
	exists map[string]bool       // ns/name of owners
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{pods: map[string]Resolution{}, exists: map[string]bool{}}
}

func (f *fakeResolver) addPod(ns, name string, owner *store.Owner, policy string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, _ := ParsePolicy(policy)
	f.pods[ns+"/"+name] = Resolution{Pod: store.Owner{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, UID: "pod-" + name}, Owner: owner, Policy: p}
	if owner != nil {
		f.exists[owner.Namespace+"/"+owner.Name] = true
	}
}

// setNetwork sets the network request annotation of a pod added before.
func (f *fakeResolver) setNetwork(ns, name, request string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.pods[ns+"/"+name]
	r.NetworkRequest = request
	f.pods[ns+"/"+name] = r
}

func (f *fakeResolver) setExists(ns, name string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exists[ns+"/"+name] = ok
}

func (f *fakeResolver) ResolvePod(_ context.Context, p PodRef) (Resolution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.pods[p.Namespace+"/"+p.Name]
	if !ok {
		return Resolution{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, ErrNotFound)
	}
	return r, nil
}

func (f *fakeResolver) OwnerExists(_ context.Context, o store.Owner) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exists[o.Namespace+"/"+o.Name], nil
}

func job(ns, name string) *store.Owner {
	return &store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: name, UID: "uid-" + name}
}

type harness struct {
	svc   *Allocator
	clock *clock
	res   *fakeResolver
	path  string
	stop  func()
}

// start runs a Allocator over the sqlite database at path until the test
// ends or stop is called, and waits for its state to load.
func start(t testing.TB, path string, res Resolver, cfg Config) (*Allocator, func()) {
	t.Helper()
	return startNodes(t, path, res, nil, cfg)
}

// startNodes is start with a directory of deleted nodes.
func startNodes(t testing.TB, path string, res Resolver, nodes NodeDirectory, cfg Config) (*Allocator, func()) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	return startStore(t, st, res, nodes, cfg)
}

// startStore is startNodes over st, which stop closes.
func startStore(t testing.TB, st store.Store, res Resolver, nodes NodeDirectory, cfg Config) (*Allocator, func()) {
	t.Helper()
	svc, err := New(st, res, nodes, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Loaded():
	case err := <-done:
		cancel()
		st.Close()
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("state did not load within 10s")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			st.Close()
		})
	}
	t.Cleanup(stop)
	return svc, stop
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{clock: newClock(), res: newFakeResolver(), path: filepath.Join(t.TempDir(), "c.db")}
	cfg.Now = h.clock.Now
	h.svc, h.stop = start(t, h.path, h.res, cfg)
	return h
}

func TestJobPodsShareOneVNI(t *testing.T) {
	h := newHarness(t, Config{})
	h.res.addPod("ml", "train-0", job("ml", "train"), "")
	h.res.addPod("ml", "train-1", job("ml", "train"), "")
	h.res.addPod("ml", "eval-0", job("ml", "eval"), "")
	ctx := t.Context()
	a, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "train-0"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "train-1"}, "n2")
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "eval-0"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if a.VNI != b.VNI || a.VNI == c.VNI || a.VNI < 1024 {
		t.Fatalf("vnis: train %d/%d eval %d", a.VNI, b.VNI, c.VNI)
	}
	if a.Scope != store.ScopeJob || a.Key != "job/ml/uid-train" {
		t.Fatalf("lease %+v", a)
	}
	again, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "train-0"}, "n1")
	if err != nil || again.VNI != a.VNI || len(again.Nodes) != 2 {
		t.Fatalf("idempotent acquire: %+v %v", again, err)
	}
}

func TestFreedOnlyWhenOwnerGoneAndNoNodeHolds(t *testing.T) {
	h := newHarness(t, Config{VNIRange: vnialloc.Range{Min: 2000, Max: 2001}})
	ctx := t.Context()
	h.res.addPod("a", "p", job("a", "j"), "")
	l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.svc.ReleaseJobVNI(ctx, l.Key, "n1"); err != nil || got.VNI != l.VNI {
		t.Fatalf("release: %+v %v", got, err)
	}
	// The job still exists: a sweep keeps its VNI.
	if r, err := h.svc.sweep(ctx); err != nil || r.Freed != 0 {
		t.Fatalf("sweep with live owner: %+v %v", r, err)
	}
	h.res.setExists("a", "j", false)
	if r, err := h.svc.sweep(ctx); err != nil || r.Freed != 1 {
		t.Fatalf("sweep with gone owner: %+v %v", r, err)
	}
	// Quarantine: with a 2-VNI range, the freed one is not reused at once.
	h.res.addPod("b", "p", job("b", "j"), "")
	h.res.addPod("c", "p", job("c", "j"), "")
	m, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "b", Name: "p"}, "n1")
	if err != nil || m.VNI == l.VNI {
		t.Fatalf("second job: %+v %v (freed vni %d)", m, err, l.VNI)
	}
	_, err = h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "c", Name: "p"}, "n1")
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, ErrExhausted) || ex.Range != "2000-2001" {
		t.Fatalf("full range: %v", err)
	}
	h.clock.Advance(61 * time.Second)
	n, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "c", Name: "p"}, "n1")
	if err != nil || n.VNI != l.VNI {
		t.Fatalf("after quarantine: %+v %v, want vni %d", n, err, l.VNI)
	}
}

func TestPodScopeAndPolicies(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	h.res.addPod("a", "bare", nil, "")
	h.res.addPod("a", "optout", job("a", "j"), "none")
	h.res.addPod("a", "solo", job("a", "j"), "pod")
	h.res.addPod("a", "joiner", job("a", "k"), "claim:shared")
	l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "bare"}, "n1")
	if err != nil || l.Scope != store.ScopePod || l.VNI == 0 {
		t.Fatalf("bare pod: %+v %v", l, err)
	}
	if freed, err := h.svc.ReleaseJobVNI(ctx, l.Key, "n1"); err != nil || freed.VNI != 0 {
		t.Fatalf("pod-scoped release should free: %+v %v", freed, err)
	}
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "optout"}, "n1"); err != nil || l.Scope != ScopeNone || l.VNI != 0 {
		t.Fatalf("opt-out: %+v %v", l, err)
	}
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "solo"}, "n1"); err != nil || l.Scope != store.ScopePod {
		t.Fatalf("pod policy: %+v %v", l, err)
	}
	if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "joiner"}, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing claim: %v", err)
	}
	h.res.setExists("a", "shared", true)
	l, err = h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "joiner"}, "n1")
	if err != nil || l.Scope != store.ScopeClaim || l.Key != "claim/a/shared" {
		t.Fatalf("claim: %+v %v", l, err)
	}
	if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "ghost"}, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown pod: %v", err)
	}
	for _, bad := range []PodRef{{Namespace: "", Name: "x"}, {Namespace: "A", Name: "x"}, {Namespace: "a", Name: "x y"}} {
		if _, err := h.svc.AcquireJobVNI(ctx, bad, "n1"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("AcquireJobVNI(%+v): %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "bare"}, "bad,node"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad node: %v", err)
	}
}

func TestFinalize(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	owner := job("a", "j")
	h.res.addPod("a", "p", owner, "")
	l, err := h.svc.AcquireOwnerVNI(ctx, *owner, Policy{Mode: ModeJob})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1"); err != nil || p.VNI != l.VNI {
		t.Fatalf("pod after sync: %+v %v", p, err)
	}
	if _, done, err := h.svc.FinalizeOwner(ctx, *owner, true); err != nil || done {
		t.Fatalf("finalize while n1 holds: done=%v %v", done, err)
	}
	if _, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n2"); !errors.Is(err, ErrOwnerGone) {
		t.Fatalf("acquire for deleting owner: %v", err)
	}
	if _, err := h.svc.ReleaseJobVNI(ctx, l.Key, "n1"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if _, done, err := h.svc.FinalizeOwner(ctx, *owner, true); err != nil || !done {
			t.Fatalf("finalize after release: done=%v %v", done, err)
		}
	}
	_, q, _ := h.svc.ListLeases()
	if len(q) != 1 || q[0].VNI != l.VNI {
		t.Fatalf("quarantine = %+v", q)
	}
}

func TestRestartKeepsLeasesAndRefusesShrink(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	var want []Lease
	for i := range 5 {
		name := fmt.Sprintf("j%d", i)
		h.res.addPod("a", name, job("a", name), "")
		l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: name}, "n1")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l)
	}
	h.stop()
	svc, stop := start(t, h.path, h.res, Config{Now: h.clock.Now})
	got, _, err := svc.ListLeases()
	if err != nil || len(got) != 5 {
		t.Fatalf("after restart: %d leases, %v", len(got), err)
	}
	for i, l := range want {
		if got[i].VNI != l.VNI || got[i].Key != l.Key {
			t.Fatalf("lease %d: got %+v want %+v", i, got[i], l)
		}
	}
	// Next-fit continues after the last VNI handed out before the restart.
	h.res.addPod("a", "next", job("a", "next"), "")
	if l, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "next"}, "n1"); err != nil || l.VNI != want[4].VNI+1 {
		t.Fatalf("after restart: %+v %v, want vni %d", l, err, want[4].VNI+1)
	}
	stop()

	st, err := sqlite.Open(ctx, h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	shrunk, err := New(st, h.res, nil, Config{VNIRange: vnialloc.Range{Min: want[2].VNI, Max: 65535}})
	if err != nil {
		t.Fatal(err)
	}
	if err := shrunk.Run(ctx); !errors.Is(err, ErrConfigConflict) {
		t.Fatalf("Run with shrunk range: %v, want ErrConfigConflict", err)
	}
}

func TestGateBeforeLoad(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := New(st, nil, nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "p"}, "n1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("AcquireJobVNI before load: %v", err)
	}
	if _, err := svc.ReleaseJobVNI(ctx, "pod/a/p", "n1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ReleaseJobVNI before load: %v", err)
	}
	if _, err := svc.AcquireSlices(ctx, "n1", "pod-vni", 1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("AcquireSlices before load: %v", err)
	}
	if _, _, err := svc.ListLeases(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ListLeases before load: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"pod range inside", Config{PodVNIRange: vnialloc.Range{Min: 2048, Max: 4095}}, true},
		{"pod range outside", Config{PodVNIRange: vnialloc.Range{Min: 100, Max: 200}}, false},
		{"pod range is everything", Config{PodVNIRange: DefaultVNIRange}, false},
		{"bad range", Config{VNIRange: vnialloc.Range{Min: 9, Max: 3}}, false},
		{"short ttl", Config{SliceTTL: time.Millisecond}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v", tt.name, err)
		}
	}
}

func openStore(t testing.TB, path string) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

package claimstatus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// fakeClient is a set of claims' status; failures[i] fails the i-th call.
type fakeClient struct {
	mu       sync.Mutex
	claims   map[controller.ClaimRef]Status
	calls    []string
	failures map[int]error
}

func newFakeClient(claims map[controller.ClaimRef]Status) *fakeClient {
	return &fakeClient{claims: claims, failures: map[int]error{}}
}

func (f *fakeClient) call(what string, c controller.ClaimRef) error {
	f.calls = append(f.calls, what+" "+c.Name)
	if err := f.failures[len(f.calls)]; err != nil {
		return err
	}
	if _, ok := f.claims[c]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, c.Name)
	}
	return nil
}

func (f *fakeClient) Get(_ context.Context, c controller.ClaimRef) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("get", c); err != nil {
		return Status{}, err
	}
	return f.claims[c], nil
}

func (f *fakeClient) Patch(_ context.Context, c controller.ClaimRef, st Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(fmt.Sprintf("patch %d %q", st.VNI, st.Message), c); err != nil {
		return err
	}
	f.claims[c] = st
	return nil
}

func (f *fakeClient) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// fakeSource is the Allocator's leases; err answers every call.
type fakeSource struct {
	vnis map[controller.ClaimRef]uint16
	err  error
}

func (s fakeSource) ClaimVNI(c controller.ClaimRef) (uint16, bool, error) {
	if s.err != nil {
		return 0, false, s.err
	}
	v, ok := s.vnis[c]
	return v, ok, nil
}

var ring = controller.ClaimRef{Namespace: "team", Name: "ring"}

// TestSync is the decision of one pass over a claim: what is read, what
// is written, what is left alone.
func TestSync(t *testing.T) {
	unavailable := fmt.Errorf("%w: state is loading", controller.ErrUnavailable)
	tests := []struct {
		name    string
		stored  map[controller.ClaimRef]Status // the claims; nil: none
		known   *Status                        // what the Writer knows already
		failed  string                         // why the claim has no VNI
		src     fakeSource
		want    []string
		wantErr bool
		after   Status // the claim's status after
	}{
		{name: "a new lease: read, then written",
			stored: map[controller.ClaimRef]Status{ring: {}}, src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}},
			want: []string{"get ring", `patch 2000 "" ring`}, after: Status{VNI: 2000}},
		{name: "the status already shows it: read only",
			stored: map[controller.ClaimRef]Status{ring: {VNI: 2000}}, src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}},
			want: []string{"get ring"}, after: Status{VNI: 2000}},
		{name: "known to show it: no call",
			stored: map[controller.ClaimRef]Status{ring: {VNI: 2000}}, known: &Status{VNI: 2000},
			src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}}, after: Status{VNI: 2000}},
		{name: "a stale VNI (another store's) is replaced",
			stored: map[controller.ClaimRef]Status{ring: {VNI: 1500}}, src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}},
			want: []string{"get ring", `patch 2000 "" ring`}, after: Status{VNI: 2000}},
		{name: "no VNI and why",
			stored: map[controller.ClaimRef]Status{ring: {}}, failed: "no VNI: the range is full", src: fakeSource{},
			want: []string{"get ring", `patch 0 "no VNI: the range is full" ring`}, after: Status{Message: "no VNI: the range is full"}},
		{name: "the VNI replaces the message",
			stored: map[controller.ClaimRef]Status{ring: {Message: "no VNI"}}, known: &Status{Message: "no VNI"},
			src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}}, want: []string{`patch 2000 "" ring`}, after: Status{VNI: 2000}},
		{name: "a VNI no lease holds is cleared",
			stored: map[controller.ClaimRef]Status{ring: {VNI: 2000}}, src: fakeSource{},
			want: []string{"get ring", `patch 0 "" ring`}, after: Status{}},
		{name: "no lease, nothing shown: read only",
			stored: map[controller.ClaimRef]Status{ring: {}}, src: fakeSource{}, want: []string{"get ring"}},
		{name: "the claim is gone: nothing to retry",
			src: fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}}, want: []string{"get ring"}},
		{name: "the state is not loaded (a standby): no call",
			stored: map[controller.ClaimRef]Status{ring: {}}, src: fakeSource{err: unavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := tt.stored
			if stored == nil {
				stored = map[controller.ClaimRef]Status{}
			}
			fc := newFakeClient(stored)
			w := New(fc, Options{})
			if tt.known != nil {
				w.known[ring] = *tt.known
			}
			if tt.failed != "" {
				w.failed[ring] = tt.failed
			}
			err := w.sync(t.Context(), tt.src, ring)
			if (err != nil) != tt.wantErr {
				t.Errorf("sync: %v, want error %v", err, tt.wantErr)
			}
			if got := fc.log(); !slices.Equal(got, tt.want) {
				t.Errorf("calls %q, want %q", got, tt.want)
			}
			if got := fc.claims[ring]; got != tt.after {
				t.Errorf("status %+v, want %+v", got, tt.after)
			}
		})
	}
}

// TestObserverQueuesOnlyChanges checks that the acquires of a claim's
// nodes cost nothing once its status shows the VNI: 5,000 nodes must not
// mean 5,000 writes.
func TestObserverQueuesOnlyChanges(t *testing.T) {
	w := New(newFakeClient(nil), Options{})
	defer w.queue.ShutDown()
	w.known[ring] = Status{VNI: 2000}
	for range 5000 {
		w.Leased(ring, 2000)
	}
	if n := w.queue.Len(); n != 0 {
		t.Fatalf("%d claims queued for a status that shows the VNI already", n)
	}
	w.Failed(ring, "no VNI")
	w.Leased(ring, 2001)
	if n := w.queue.Len(); n != 1 {
		t.Fatalf("%d claims queued after a change, want 1 (one claim, queued once)", n)
	}
	w.Forget(ring)
	if _, ok := w.known[ring]; ok {
		t.Error("a forgotten claim is still known")
	}
}

// runWriter runs w until the test ends.
func runWriter(t *testing.T, w *Writer, src Source) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitUntil polls cond until it holds or a deadline passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		if err := backoff.Sleep(t.Context(), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRetries checks that failed calls are retried with backoff and
// counted, that the retries are bounded, and that the next acquire
// naming the claim after giving up tries again.
func TestRetries(t *testing.T) {
	boom := errors.New("the API server is restarting")
	tests := []struct {
		name       string
		fail       []int // calls that fail
		wantCalls  int
		wantErrors float64
		wantGaveUp float64
		want       Status
	}{
		{"one failed patch", []int{2}, 3, 1, 0, Status{VNI: 2000}},
		{"a failed read, then a failed patch", []int{1, 3}, 4, 2, 0, Status{VNI: 2000}},
		{"every attempt fails", []int{1, 2, 3, 4}, 4, 4, 1, Status{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeClient(map[controller.ClaimRef]Status{ring: {}})
			for _, i := range tt.fail {
				fc.failures[i] = boom
			}
			reg := prometheus.NewRegistry()
			w := New(fc, Options{Registerer: reg, Workers: 2,
				Retry: backoff.Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Attempts: 4}})
			runWriter(t, w, fakeSource{vnis: map[controller.ClaimRef]uint16{ring: 2000}})
			w.Leased(ring, 2000)
			settled := func() bool {
				fc.mu.Lock()
				defer fc.mu.Unlock()
				if tt.wantGaveUp > 0 {
					return testutil.ToFloat64(w.gaveUp) == tt.wantGaveUp
				}
				return fc.claims[ring] == tt.want
			}
			waitUntil(t, "the status written or given up", settled)
			if got := len(fc.log()); got != tt.wantCalls {
				t.Errorf("%d calls %q, want %d", got, fc.log(), tt.wantCalls)
			}
			errs := testutil.ToFloat64(w.calls.WithLabelValues("get", "error")) + testutil.ToFloat64(w.calls.WithLabelValues("patch", "error"))
			if errs != tt.wantErrors {
				t.Errorf("%v errors counted, want %v", errs, tt.wantErrors)
			}
			if tt.wantGaveUp == 0 {
				return
			}
			// Given up: the claim's next acquire tries again, and the
			// API server is back.
			w.Leased(ring, 2000)
			waitUntil(t, "the status written on the next acquire", func() bool {
				fc.mu.Lock()
				defer fc.mu.Unlock()
				return fc.claims[ring] == Status{VNI: 2000}
			})
		})
	}
}

// TestLoadedRereadsEveryClaim checks that a load (a start, a takeover)
// reads every claim lease's status anew and writes only those that
// differ: another replica may have written them, or nobody.
func TestLoadedRereadsEveryClaim(t *testing.T) {
	a := controller.ClaimRef{Namespace: "team", Name: "a"}
	b := controller.ClaimRef{Namespace: "team", Name: "b"}
	fc := newFakeClient(map[controller.ClaimRef]Status{a: {VNI: 2000}, b: {}})
	w := New(fc, Options{Workers: 1})
	w.known[a] = Status{VNI: 1999} // what this replica last wrote, before losing the lead
	runWriter(t, w, fakeSource{vnis: map[controller.ClaimRef]uint16{a: 2000, b: 2001}})
	w.Loaded([]controller.ClaimRef{a, b})
	waitUntil(t, "b's status written", func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.claims[b] == Status{VNI: 2001} && len(fc.calls) == 3
	})
	got := fc.log()
	slices.Sort(got)
	if want := []string{"get a", "get b", `patch 2001 "" b`}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// floodServer is an API server that accepts "agent-tok" as the agent of
// node n1 and rejects every other token, after holding it until release
// closes: the junk of a flood stays in flight, as it would on a loaded
// API server. It counts the reviews of each kind.
type floodServer struct {
	agent, junk atomic.Int64
	release     chan struct{}
}

// newFloodServer returns the server and a client of it with the given rate
// limit.
func newFloodServer(t *testing.T, qps float32, burst int) (*floodServer, kubernetes.Interface) {
	t.Helper()
	s := &floodServer{release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		if tr.Spec.Token == "agent-tok" {
			s.agent.Add(1)
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
				Username: agentSA, Extra: map[string]authnv1.ExtraValue{NodeNameExtra: {"n1"}}}}
		} else {
			s.junk.Add(1)
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	}))
	// Cleanups run last first: release the held junk, then close.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { s.open() })
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: qps, Burst: burst,
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return s, cs
}

// open lets held and later junk reviews through.
func (s *floodServer) open() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// fakeClock is the TokenReview's clock, moved by the test while reviews
// run.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t0 time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) install(tr *TokenReview) { tr.now = c.now }

func junkToken(i int) string { return fmt.Sprintf("junk-%06d", i) }

// flood authenticates n distinct junk tokens at once, each in a goroutine
// that ends with ctx; the returned wait waits for them all.
func flood(ctx context.Context, tr *TokenReview, n int) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _ = tr.Authenticate(withToken(ctx, junkToken(i))) })
	}
	return wg.Wait
}

// Issue 24, item 1: any pod can reach the gRPC port, and each distinct
// token started its own review through the one rate-limited client, so a
// flood of random tokens queued a known agent's renewal (its review past
// the TTL) behind the junk: with 300 junk tokens at 20 reviews a second,
// about 13 s. The agent's renewal must not wait for them.
func TestIssue24Item1TokenFloodDelaysKnownAgent(t *testing.T) {
	// The controller's defaults, --token-review-qps 20, --token-review-burst 40.
	s, cs := newFloodServer(t, 20, 40)
	tr := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}})
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	clock.install(tr)
	if _, err := tr.Authenticate(withToken(t.Context(), "agent-tok")); err != nil {
		t.Fatalf("agent's first call: %v", err)
	}

	floodCtx, stop := context.WithCancel(t.Context())
	wait := flood(floodCtx, tr, 300)
	defer wait()
	defer stop()
	waitFor(t, "the flood to reach the API server", func() bool { return s.junk.Load() >= DefaultUnknownBurst })

	// The agent's acceptance is past its TTL: its next call reviews the
	// token again, while the flood is in flight and queued.
	clock.advance(DefaultReviewTTL + time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	id, err := tr.Authenticate(withToken(ctx, "agent-tok"))
	took := time.Since(start)
	if err != nil || id.Node != "n1" {
		t.Fatalf("known agent during a flood of %d junk reviews (took %s): %+v, %v", s.junk.Load(), took, id, err)
	}
	if got := s.agent.Load(); got != 2 {
		t.Fatalf("the agent's token was reviewed %d times, want 2 (first call, renewal)", got)
	}
	// Unloaded, the renewal takes milliseconds; a second means it waited.
	if took > time.Second {
		t.Fatalf("known agent's renewal took %s during the flood, want it not to wait for the junk", took)
	}
	t.Logf("known agent's renewal took %s with %d junk reviews at the API server", took, s.junk.Load())
}

// Issue 24, item 1: rejections shared the one cache of 4,096 reviews with
// acceptances, and a full cache evicted arbitrary entries: a flood of
// random tokens evicted the agents' acceptances, and every agent call
// then needed a review again. Acceptances are cached apart.
func TestIssue24Item1TokenFloodEvictsKnownAgent(t *testing.T) {
	s, cs := newFloodServer(t, 1000, 1000)
	s.open()
	// A rate for unknown tokens high enough that the flood is reviewed,
	// not refused: the eviction is what this test looks at.
	tr := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}, CacheMax: 8, RejectCacheMax: 8, UnknownQPS: 1e6, UnknownBurst: 1000})
	newFakeClock(time.Unix(1_700_000_000, 0)).install(tr)
	if _, err := tr.Authenticate(withToken(t.Context(), "agent-tok")); err != nil {
		t.Fatalf("agent's first call: %v", err)
	}
	for i := range 100 {
		if _, err := tr.Authenticate(withToken(t.Context(), junkToken(i))); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("junk token %d: %v, want it rejected", i, err)
		}
	}
	if got := s.junk.Load(); got != 100 {
		t.Fatalf("%d junk reviews, want 100", got)
	}
	if _, err := tr.Authenticate(withToken(t.Context(), "agent-tok")); err != nil {
		t.Fatalf("agent after the flood: %v", err)
	}
	if got := s.agent.Load(); got != 1 {
		t.Fatalf("the agent's token was reviewed %d times, want 1: its acceptance was evicted by the flood", got)
	}
	if n := len(tr.rejected); n > 8 {
		t.Fatalf("%d cached rejections, want at most 8", n)
	}
}

// Unknown tokens beyond the queue are refused at once, unreviewed, with
// an error the interceptor answers with Unavailable (the agent retries);
// the refusal is not cached, and a rejection is (briefly).
func TestIssue24Item1UnknownTokensQueueBounded(t *testing.T) {
	s, cs := newFloodServer(t, 1000, 1000)
	tr := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}, UnknownQueue: 4, UnknownQPS: 1e6, UnknownBurst: 1000})
	floodCtx, stop := context.WithCancel(t.Context())
	wait := flood(floodCtx, tr, 4)
	defer wait()
	defer stop()
	waitFor(t, "the queue to fill", func() bool { return s.junk.Load() == 4 })

	_, err := tr.Authenticate(withToken(t.Context(), "one-more"))
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("an unknown token beyond the queue: %v, want ErrOverloaded", err)
	}
	h := UnaryInterceptor(tr)
	_, err = h(withToken(t.Context(), "one-more"), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("interceptor: %v, want Unavailable", err)
	}
	if got := s.junk.Load(); got != 4 {
		t.Fatalf("%d reviews, want the 4 queued only", got)
	}
	s.open()
	stop()
	wait()
	// The queue is free again; the refused token is reviewed and its
	// rejection reused.
	for range 2 {
		if _, err := tr.Authenticate(withToken(t.Context(), "one-more")); errors.Is(err, ErrOverloaded) || !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("unknown token after the flood: %v, want rejected", err)
		}
	}
	if got := s.junk.Load(); got != 5 {
		t.Fatalf("%d junk reviews, want 5: the rejection reused", got)
	}
}

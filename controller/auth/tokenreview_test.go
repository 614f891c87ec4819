package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// reviewServer is an API server that answers TokenReviews for the agent's
// ServiceAccount on node n1; hold, when not nil, decides per call (1, 2,
// ...) whether it waits for release before answering.
type reviewServer struct {
	calls   atomic.Int64
	release chan struct{}
	client  kubernetes.Interface
}

func newReviewServer(t *testing.T, hold func(call int64) bool) *reviewServer {
	t.Helper()
	s := &reviewServer{release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.NotFound(w, r)
			return
		}
		n := s.calls.Add(1)
		if hold != nil && hold(n) {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
			Username: agentSA, Extra: map[string]authnv1.ExtraValue{NodeNameExtra: {"n1"}}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
	})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: 1000, Burst: 1000,
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	s.client = cs
	return s
}

// waiting is how many callers wait on the review in flight for token.
func (t *TokenReview) waiting(token string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.inflight[sha256.Sum256([]byte(token))]; ok {
		return f.waiters
	}
	return 0
}

// waitFor polls cond, bounded, for state another goroutine changes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // a bounded poll on state, not a synchronization by time
	}
}

// Issue 15, item 9: a burst of calls with one token, all at once (every
// agent call of a node after a controller restart), makes one TokenReview;
// the others wait for it and share its answer.
func TestIssue15Item9BurstMakesOneReview(t *testing.T) {
	const n = 50
	s := newReviewServer(t, func(int64) bool { return true })
	tr := NewTokenReview(s.client, TokenReviewConfig{Allowed: []string{agentSA}})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			id, err := tr.Authenticate(withToken(t.Context(), "agent-tok"))
			if err == nil && id.Node != "n1" {
				err = fmt.Errorf("identity %+v", id)
			}
			errs <- err
		})
	}
	waitFor(t, "the burst to wait on one review", func() bool { return tr.waiting("agent-tok") == n-1 })
	close(s.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := s.calls.Load(); got != 1 {
		t.Fatalf("%d calls with one token made %d TokenReviews, want 1", n, got)
	}
	if _, err := tr.Authenticate(withToken(t.Context(), "agent-tok")); err != nil || s.calls.Load() != 1 {
		t.Fatalf("a call after the burst: %v, %d reviews, want the cached one", err, s.calls.Load())
	}
}

// A caller that waited on another's review, whose context ended before the
// review did, reviews the token itself instead of taking that caller's
// error.
func TestIssue15Item9AbandonedReviewRetried(t *testing.T) {
	s := newReviewServer(t, func(call int64) bool { return call == 1 })
	tr := NewTokenReview(s.client, TokenReviewConfig{Allowed: []string{agentSA}})
	first, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := tr.Authenticate(withToken(first, "agent-tok"))
		firstErr <- err
	}()
	waitFor(t, "the first review to reach the API server", func() bool { return s.calls.Load() == 1 })
	second := make(chan error, 1)
	go func() {
		_, err := tr.Authenticate(withToken(t.Context(), "agent-tok"))
		second <- err
	}()
	waitFor(t, "the second caller to wait", func() bool { return tr.waiting("agent-tok") == 1 })
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v, want its own cancellation", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second caller: %v, want its own review's answer", err)
	}
	if got := s.calls.Load(); got != 2 {
		t.Fatalf("%d reviews, want 2", got)
	}
}

// jwt makes an unsigned token with the given claims; the fake API server
// below accepts it as the real one would accept a signed one.
func jwt(claims map[string]any) string {
	b, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(b) + "." + enc([]byte("sig"))
}

// Issue 15, item 9: a review is reused for at most the TTL and never past
// the token's expiry; a rejection only briefly; a failed review call never.
func TestIssue15Item9ReviewCacheLifetime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name  string
		token string
		fail  bool          // the review call fails
		at    time.Duration // when the second call comes, after the first
		want  int64         // reviews made by the two calls
	}{
		{"accepted, within TTL", jwt(map[string]any{"exp": t0.Add(time.Hour).Unix()}), false, 29 * time.Second, 1},
		{"accepted, TTL over", jwt(map[string]any{"exp": t0.Add(time.Hour).Unix()}), false, 30 * time.Second, 2},
		{"accepted, token not a JWT, within TTL", "opaque", false, 29 * time.Second, 1},
		{"accepted, before the token expires", jwt(map[string]any{"exp": t0.Add(5 * time.Second).Unix()}), false, 4 * time.Second, 1},
		{"accepted, token expired, TTL not over", jwt(map[string]any{"exp": t0.Add(5 * time.Second).Unix()}), false, 5 * time.Second, 2},
		{"accepted, token already expired", jwt(map[string]any{"exp": t0.Add(-time.Second).Unix()}), false, 0, 2},
		{"rejected, briefly reused", "bogus", false, time.Second, 1},
		{"rejected, not for long", "bogus", false, 2 * time.Second, 2},
		{"review call failed", jwt(map[string]any{"exp": t0.Add(time.Hour).Unix()}), true, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			cs := reviewer(t, map[string][2]string{tt.token: {agentSA, "n1"}}, &calls)
			if tt.token == "bogus" {
				cs = reviewer(t, nil, &calls)
			}
			if tt.fail {
				cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
					calls.Add(1)
					return true, nil, errors.New("connection refused")
				})
			}
			tr := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}})
			now := t0
			tr.now = func() time.Time { return now }
			_, err1 := tr.Authenticate(withToken(t.Context(), tt.token))
			now = now.Add(tt.at)
			_, err2 := tr.Authenticate(withToken(t.Context(), tt.token))
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("answers differ: %v, then %v", err1, err2)
			}
			if got := calls.Load(); got != tt.want {
				t.Fatalf("%d reviews, want %d", got, tt.want)
			}
		})
	}
}

// The cache holds at most CacheMax reviews, and the newest is among them.
func TestIssue15Item9ReviewCacheBounded(t *testing.T) {
	users := map[string][2]string{}
	for i := range 100 {
		users[fmt.Sprint("tok-", i)] = [2]string{agentSA, "n1"}
	}
	var calls atomic.Int64
	// 100 new tokens at once: no rate limit on unknown tokens here.
	tr := NewTokenReview(reviewer(t, users, &calls), TokenReviewConfig{Allowed: []string{agentSA}, CacheMax: 8, UnknownQPS: 1e6, UnknownBurst: 1000})
	for i := range 100 {
		if _, err := tr.Authenticate(withToken(t.Context(), fmt.Sprint("tok-", i))); err != nil {
			t.Fatal(err)
		}
		if n := len(tr.cache); n > 8 {
			t.Fatalf("%d cached reviews, want at most 8", n)
		}
	}
	if _, err := tr.Authenticate(withToken(t.Context(), "tok-99")); err != nil || calls.Load() != 100 {
		t.Fatalf("newest token: %v, %d reviews, want it cached (100)", err, calls.Load())
	}
}

func TestTokenExpiry(t *testing.T) {
	tests := []struct {
		token string
		want  time.Time
		ok    bool
	}{
		{jwt(map[string]any{"exp": 1700000000}), time.Unix(1700000000, 0), true},
		{jwt(map[string]any{"exp": 1700000000.5}), time.Unix(1700000000, 0), true},
		{jwt(map[string]any{"iat": 1}), time.Time{}, false},
		{jwt(map[string]any{"exp": "soon"}), time.Time{}, false},
		{jwt(map[string]any{"exp": -1}), time.Time{}, false},
		{jwt(map[string]any{"exp": 1e300}), time.Time{}, false},
		{"a.b", time.Time{}, false},
		{"a.!!!.c", time.Time{}, false},
		{"", time.Time{}, false},
		{strings.Repeat(".", 5), time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := TokenExpiry(tt.token)
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("TokenExpiry(%q) = %v, %v; want %v, %v", tt.token, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzTokenExpiry(f *testing.F) {
	f.Add(jwt(map[string]any{"exp": 1700000000}))
	f.Add("a.e30.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		if exp, ok := TokenExpiry(token); ok && (exp.Before(time.Unix(0, 0)) || exp.After(time.Unix(1<<40, 0))) {
			t.Fatalf("TokenExpiry(%q) = %v", token, exp)
		}
	})
}

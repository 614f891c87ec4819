package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeNameExtra is the user extra a pod-bound ServiceAccount token carries
// with the name of the pod's node (k8s.io/apiserver's
// serviceaccount.NodeNameKey; set since Kubernetes 1.30, where the
// ServiceAccountTokenPodNodeInfo feature is on by default, locked on
// since 1.32).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Defaults of [TokenReviewConfig].
const (
	DefaultReviewTTL      = 30 * time.Second
	DefaultRejectTTL      = 2 * time.Second
	DefaultReviewCacheMax = 4096
)

// reviewAttempts bounds how often a caller reviews a token whose
// in-flight review it waited on was abandoned by its first caller.
const reviewAttempts = 3

// TokenReviewConfig configures [NewTokenReview].
type TokenReviewConfig struct {
	// Audiences a token must carry (none: the API server's default).
	Audiences []string
	// Allowed are the users accepted, e.g.
	// "system:serviceaccount:slingshot:slingshot-agent".
	Allowed []string
	// TTL bounds how long an accepted review is reused; never past the
	// token's own expiry (its "exp" claim). 0: DefaultReviewTTL. A
	// deleted agent pod's token stays accepted for at most this long.
	TTL time.Duration
	// RejectTTL is how long a rejection (token invalid, or not an agent's)
	// is reused; 0: DefaultRejectTTL. Errors of the API call itself are
	// never reused.
	RejectTTL time.Duration
	// CacheMax bounds the cached reviews; 0: DefaultReviewCacheMax.
	CacheMax int
	// Registerer for slingshot_controller_token_reviews_total{result};
	// nil registers none.
	Registerer prometheus.Registerer
}

// TokenReview authenticates projected ServiceAccount tokens with the
// TokenReview API. Reviews are cached, keyed by the token's SHA-256, and
// concurrent calls with one token share one review, so that a burst of
// calls (every agent reconnecting after a controller restart) makes one
// review per token. Give it a client of its own, with its own rate limit:
// a burst of reviews must not delay the leader election's renewals. It is
// safe for concurrent use.
type TokenReview struct {
	client kubernetes.Interface
	cfg    TokenReviewConfig
	now    func() time.Time
	total  *prometheus.CounterVec

	mu       sync.Mutex
	cache    map[[32]byte]cached
	inflight map[[32]byte]*flight
}

type cached struct {
	id      Identity
	err     error
	expires time.Time
}

// flight is one review in progress; done closes when id and err are set.
type flight struct {
	done    chan struct{}
	id      Identity
	err     error
	waiters int  // callers waiting on it besides the one reviewing
	dropped bool // the reviewing caller's context ended first
}

// NewTokenReview returns an authenticator that reviews tokens through
// client, which should be used for nothing else.
func NewTokenReview(client kubernetes.Interface, cfg TokenReviewConfig) *TokenReview {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultReviewTTL
	}
	if cfg.RejectTTL <= 0 {
		cfg.RejectTTL = DefaultRejectTTL
	}
	if cfg.CacheMax <= 0 {
		cfg.CacheMax = DefaultReviewCacheMax
	}
	t := &TokenReview{client: client, cfg: cfg, now: time.Now,
		cache: map[[32]byte]cached{}, inflight: map[[32]byte]*flight{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_token_reviews_total",
			Help: "Agent token authentications by result: cached (a recent review reused), shared (another call's review in flight), accepted, rejected, error (the TokenReview call failed).",
		}, []string{"result"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(t.total)
	}
	return t
}

// Authenticate implements [Authenticator].
func (t *TokenReview) Authenticate(ctx context.Context) (Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if rest, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(rest)
		}
	}
	if token == "" {
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	key := sha256.Sum256([]byte(token))
	for attempt := 1; ; attempt++ {
		f, reviewer, hit := t.join(key)
		if hit != nil {
			t.total.WithLabelValues("cached").Inc()
			return hit.id, hit.err
		}
		if reviewer {
			id, err := t.review(ctx, token)
			t.finish(ctx, key, token, f, id, err)
			return id, err
		}
		t.total.WithLabelValues("shared").Inc()
		select {
		case <-f.done:
		case <-ctx.Done():
			return Identity{}, fmt.Errorf("%w: token review: %w", ErrUnauthenticated, context.Cause(ctx))
		}
		// The first caller went away mid-review: its error is its own
		// context's, not this caller's; review again, a bounded number
		// of times.
		if !f.dropped || attempt >= reviewAttempts {
			return f.id, f.err
		}
	}
}

// join returns a fresh cached review, or the review in flight for key and
// whether the caller is to make it (no review was in flight).
func (t *TokenReview) join(key [32]byte) (f *flight, reviewer bool, hit *cached) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cache[key]; ok {
		if t.now().Before(c.expires) {
			return nil, false, &c
		}
		delete(t.cache, key)
	}
	if f, ok := t.inflight[key]; ok {
		f.waiters++
		return f, false, nil
	}
	f = &flight{done: make(chan struct{})}
	t.inflight[key] = f
	return f, true, nil
}

// finish publishes a review to its waiters and caches it: an accepted
// one until TTL or the token's expiry, whichever is first; a rejection
// for RejectTTL; a failed API call (or a review cut short by ctx) not.
func (t *TokenReview) finish(ctx context.Context, key [32]byte, token string, f *flight, id Identity, err error) {
	now := t.now()
	var expires time.Time
	dropped := err != nil && ctx.Err() != nil
	switch {
	case dropped:
		t.total.WithLabelValues("error").Inc()
	case err == nil:
		t.total.WithLabelValues("accepted").Inc()
		expires = now.Add(t.cfg.TTL)
		if exp, ok := TokenExpiry(token); ok && exp.Before(expires) {
			expires = exp
		}
	case isRejection(err):
		t.total.WithLabelValues("rejected").Inc()
		expires = now.Add(t.cfg.RejectTTL)
	default:
		t.total.WithLabelValues("error").Inc()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inflight, key)
	f.id, f.err, f.dropped = id, err, dropped
	close(f.done)
	if !now.Before(expires) {
		return
	}
	if len(t.cache) >= t.cfg.CacheMax {
		t.evict(now)
	}
	t.cache[key] = cached{id: id, err: err, expires: expires}
}

// evict drops expired reviews, then arbitrary ones (map order) until one
// more fits. Called with mu held.
func (t *TokenReview) evict(now time.Time) {
	for k, v := range t.cache {
		if !now.Before(v.expires) {
			delete(t.cache, k)
		}
	}
	for k := range t.cache {
		if len(t.cache) < t.cfg.CacheMax {
			break
		}
		delete(t.cache, k)
	}
}

// rejection marks review errors that are the API server's answer about the
// token, not a failure to get one.
type rejection struct{ error }

func (r rejection) Unwrap() error { return r.error }

func isRejection(err error) bool {
	_, ok := err.(rejection)
	return ok
}

func (t *TokenReview) review(ctx context.Context, token string) (Identity, error) {
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: t.cfg.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: token review: %w", ErrUnauthenticated, err)
	}
	if !tr.Status.Authenticated {
		return Identity{}, rejection{fmt.Errorf("%w: token rejected: %s", ErrUnauthenticated, tr.Status.Error)}
	}
	user := tr.Status.User.Username
	if !slices.Contains(t.cfg.Allowed, user) {
		return Identity{}, rejection{fmt.Errorf("%w: %s is not an agent service account", ErrForbidden, user)}
	}
	id := Identity{User: user}
	if v := tr.Status.User.Extra[NodeNameExtra]; len(v) == 1 {
		id.Node = v[0]
	}
	return id, nil
}

// TokenExpiry returns the "exp" claim of a JWT, read without checking its
// signature: only for a token the API server has just accepted, whose
// claims it has checked. ok is false when the token is not a JWT or has
// no usable exp.
func TokenExpiry(token string) (exp time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	// Seconds since the epoch; anything outside what time.Unix can hold
	// is not a usable expiry.
	if e := *claims.Exp; math.IsNaN(e) || e < 0 || e > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(int64(*claims.Exp), 0), true
}

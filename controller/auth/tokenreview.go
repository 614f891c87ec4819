package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
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
	DefaultUnknownQPS     = 5
	DefaultUnknownBurst   = 10
	DefaultUnknownQueue   = 64
	// DefaultCandidateQueue bounds the agent candidates (one per claimed
	// node) waiting for or in review: above the 5,000 nodes the project
	// targets.
	DefaultCandidateQueue = 8192
	// DefaultReviewQPS and DefaultReviewBurst are the controller's
	// defaults of --token-review-qps and --token-review-burst, the rate
	// limit of its TokenReview client. A TokenReview is cheap for the API
	// server (a signature check and a cached pod look-up, no etcd write);
	// at these rates 5,000 agents are reviewed within about 3 s after a
	// controller restart, while their renewals take about 170 a second
	// (one per agent per 30 s TTL).
	DefaultReviewQPS   = 2000
	DefaultReviewBurst = 2000
)

// The per-connection bound on agent candidates: an agent presents one
// token at a time (a new one about hourly), so a connection that starts
// candidate reviews faster than this is not an agent's, and its further
// tokens go to the unknown lane.
const (
	candidateConnQPS   = 1
	candidateConnBurst = 4
	// candidateConnsMax bounds the connections tracked.
	candidateConnsMax = 16384
	// maxNodeName is the longest node name (a DNS subdomain).
	maxNodeName = 253
)

// knownWithoutExpiry is how long a token that was accepted and carries no
// "exp" claim stays known (reviewed ahead of unknown tokens) after its
// last acceptance. Projected tokens always carry one.
const knownWithoutExpiry = time.Hour

// ErrOverloaded is wrapped when a token nobody presented successfully
// before cannot be reviewed now: too many unknown tokens are being
// reviewed or wait for review. [UnaryInterceptor] answers it with
// Unavailable, which agents retry.
var ErrOverloaded = errors.New("overloaded: too many unknown tokens under review")

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
	// CacheMax bounds the cached acceptances; 0: DefaultReviewCacheMax.
	// Only tokens the API server accepted as an Allowed user enter this
	// cache, so no flood of other tokens can evict an agent's.
	CacheMax int
	// RejectCacheMax bounds the cached rejections, a cache of their own;
	// 0: DefaultReviewCacheMax.
	RejectCacheMax int
	// ClientQPS and ClientBurst are the rate limit of the client's own
	// limiter (the controller's --token-review-qps, --token-review-burst);
	// when set, the lanes' rates not set take their shares of it:
	// CandidateQPS three quarters, UnknownQPS a hundredth, which leaves
	// the rest (about a fifth) to known agents' renewals.
	ClientQPS   float64
	ClientBurst int
	// UnknownQPS and UnknownBurst bound the rate of reviews of unknown
	// tokens: those never accepted before, or whose acceptance expired
	// with the token. Known tokens (an agent renewing its review after
	// the TTL) do not wait for them, and take what the client's own rate
	// limit leaves: keep UnknownQPS well below it. 0: DefaultUnknownQPS,
	// DefaultUnknownBurst.
	UnknownQPS   float64
	UnknownBurst int
	// UnknownQueue bounds the unknown tokens waiting for or in review at
	// once; a call beyond it fails at once with ErrOverloaded. 0:
	// DefaultUnknownQueue.
	UnknownQueue int
	// CandidateQPS, CandidateBurst and CandidateQueue are the same bounds
	// for agent candidates: unknown tokens whose claims, read unverified,
	// are those of a projected token of an Allowed ServiceAccount bound
	// to a pod on a node, unexpired and for one of Audiences. Only one
	// candidate per claimed node is reviewed at a time; the others wait
	// for it. A candidate is still reviewed like any token: its claims
	// only choose its lane. 0: the share of ClientQPS, ClientBurst, else
	// DefaultUnknownQPS, DefaultUnknownBurst; DefaultCandidateQueue.
	CandidateQPS   float64
	CandidateBurst int
	CandidateQueue int
	// Registerer for slingshot_controller_token_reviews_total{result};
	// nil registers none.
	Registerer prometheus.Registerer
}

// TokenReview authenticates projected ServiceAccount tokens with the
// TokenReview API. Reviews are cached, keyed by the token's SHA-256, and
// concurrent calls with one token share one review, so that a burst of
// calls (every agent reconnecting after a controller restart) makes one
// review per token. Give it a client of its own, with its own rate limit:
// a burst of reviews must not delay the leader election's renewals.
//
// The gRPC port is open to every pod, and anyone can present random
// tokens. So acceptances and rejections are cached apart (a rejection
// cannot evict an acceptance), and a token that was never accepted is
// reviewed in a lane with a rate limit and a bounded queue of its own,
// which a known agent's renewal never waits in: agent candidates (by
// their unverified claims) in one, one per claimed node at a time, and
// everything else in a small one. It is safe for concurrent use.
type TokenReview struct {
	client kubernetes.Interface
	cfg    TokenReviewConfig
	now    func() time.Time
	total  *prometheus.CounterVec
	// unknown reviews the tokens never accepted before that are not
	// candidates (junk, mostly); candidates the agent candidates.
	unknown, candidates lane

	mu       sync.Mutex
	cache    map[[32]byte]accepted
	rejected map[[32]byte]rejected
	inflight map[[32]byte]*flight
	// nodes holds, per claimed node, the candidate review in progress;
	// its channel closes when it ends.
	nodes map[string]chan struct{}
	// conns holds the candidate rate of each connection, by its remote
	// address.
	conns map[string]*rate.Limiter
}

// lane is a queue of reviews under a rate limit of its own.
type lane struct {
	lim *rate.Limiter
	// slots holds one value per token waiting for or in review.
	slots chan struct{}
}

// accepted is a cached acceptance: reused until fresh, then reviewed
// again as a known token until known.
type accepted struct {
	id           Identity
	fresh, known time.Time
}

type rejected struct {
	err     error
	expires time.Time
}

// cached is a review reused without asking the API server.
type cached struct {
	id  Identity
	err error
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
	if cfg.RejectCacheMax <= 0 {
		cfg.RejectCacheMax = DefaultReviewCacheMax
	}
	if cfg.UnknownQPS <= 0 && cfg.ClientQPS > 0 {
		cfg.UnknownQPS = cfg.ClientQPS / 100
	}
	if cfg.UnknownBurst <= 0 && cfg.ClientBurst > 0 {
		cfg.UnknownBurst = max(1, cfg.ClientBurst/100)
	}
	if cfg.CandidateQPS <= 0 && cfg.ClientQPS > 0 {
		cfg.CandidateQPS = cfg.ClientQPS * 3 / 4
	}
	if cfg.CandidateBurst <= 0 && cfg.ClientBurst > 0 {
		cfg.CandidateBurst = max(1, cfg.ClientBurst*3/4)
	}
	if cfg.CandidateQPS <= 0 {
		cfg.CandidateQPS = DefaultUnknownQPS
	}
	if cfg.CandidateBurst <= 0 {
		cfg.CandidateBurst = DefaultUnknownBurst
	}
	if cfg.CandidateQueue <= 0 {
		cfg.CandidateQueue = DefaultCandidateQueue
	}
	if cfg.UnknownQPS <= 0 {
		cfg.UnknownQPS = DefaultUnknownQPS
	}
	if cfg.UnknownBurst <= 0 {
		cfg.UnknownBurst = DefaultUnknownBurst
	}
	if cfg.UnknownQueue <= 0 {
		cfg.UnknownQueue = DefaultUnknownQueue
	}
	t := &TokenReview{client: client, cfg: cfg, now: time.Now,
		unknown:    lane{lim: rate.NewLimiter(rate.Limit(cfg.UnknownQPS), cfg.UnknownBurst), slots: make(chan struct{}, cfg.UnknownQueue)},
		candidates: lane{lim: rate.NewLimiter(rate.Limit(cfg.CandidateQPS), cfg.CandidateBurst), slots: make(chan struct{}, cfg.CandidateQueue)},
		cache:      map[[32]byte]accepted{}, rejected: map[[32]byte]rejected{}, inflight: map[[32]byte]*flight{},
		nodes: map[string]chan struct{}{}, conns: map[string]*rate.Limiter{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_token_reviews_total",
			Help: "Agent token authentications by result: cached (a recent review reused), shared (another call's review in flight), accepted, rejected, error (the TokenReview call failed), overloaded (an unknown token refused unreviewed: too many under review).",
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
		f, reviewer, known, hit := t.join(key)
		if hit != nil {
			t.total.WithLabelValues("cached").Inc()
			return hit.id, hit.err
		}
		if reviewer {
			id, err := t.route(ctx, token, known)
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
// whether the caller is to make it (no review was in flight) and whether
// the token is known (accepted before, and not expired).
func (t *TokenReview) join(key [32]byte) (f *flight, reviewer, known bool, hit *cached) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if a, ok := t.cache[key]; ok {
		switch {
		case now.Before(a.fresh):
			return nil, false, false, &cached{id: a.id}
		case now.Before(a.known):
			known = true
		default:
			delete(t.cache, key)
		}
	}
	if r, ok := t.rejected[key]; ok {
		if now.Before(r.expires) {
			return nil, false, false, &cached{err: r.err}
		}
		delete(t.rejected, key)
	}
	if f, ok := t.inflight[key]; ok {
		f.waiters++
		return f, false, known, nil
	}
	f = &flight{done: make(chan struct{})}
	t.inflight[key] = f
	return f, true, known, nil
}

// route reviews token in its lane: a known one at once; an agent
// candidate in the candidates' lane, one per claimed node at a time; any
// other in the unknown lane. So a flood of junk tokens spends only the
// unknown lane's share of the client's rate limit and delays neither a
// known agent's renewal nor a restarted controller's first review of
// every agent; a flood of forged candidates waits per claimed node.
func (t *TokenReview) route(ctx context.Context, token string, known bool) (Identity, error) {
	if known {
		return t.review(ctx, token)
	}
	node, ok := t.candidate(ctx, token)
	if !ok {
		return t.reviewIn(ctx, &t.unknown, token)
	}
	release, err := t.holdNode(ctx, node)
	if err != nil {
		return Identity{}, err
	}
	defer release()
	return t.reviewIn(ctx, &t.candidates, token)
}

// candidate returns the node that token claims, when its claims, read
// without checking its signature, are those of an agent: a projected
// token of an Allowed ServiceAccount, bound to a pod on a node, not
// expired, for one of the Audiences; and ctx's connection has not
// started candidate reviews faster than an agent does.
func (t *TokenReview) candidate(ctx context.Context, token string) (node string, ok bool) {
	var c projectedClaims
	if !decodeClaims(token, &c) || c.Exp == nil {
		return "", false
	}
	k := c.Kube
	if k.Node == nil || k.Pod == nil || k.ServiceAccount == nil || k.Node.Name == "" || len(k.Node.Name) > maxNodeName || k.Pod.Name == "" {
		return "", false
	}
	if c.Sub != "system:serviceaccount:"+k.Namespace+":"+k.ServiceAccount.Name || !slices.Contains(t.cfg.Allowed, c.Sub) {
		return "", false
	}
	if exp, ok := expiry(*c.Exp); !ok || !t.now().Before(exp) {
		return "", false
	}
	if len(t.cfg.Audiences) > 0 && !slices.ContainsFunc(c.Aud, func(a string) bool { return slices.Contains(t.cfg.Audiences, a) }) {
		return "", false
	}
	if !t.connAllows(ctx) {
		return "", false
	}
	return k.Node.Name, true
}

// connAllows takes one candidate review from the rate of ctx's
// connection; a call with no peer (in-process) is not bounded.
func (t *TokenReview) connAllows(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return true
	}
	addr := p.Addr.String()
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.conns[addr]
	if !ok {
		if len(t.conns) >= candidateConnsMax {
			// Forget the connections that have their whole burst back:
			// forgetting them changes nothing.
			for a, r := range t.conns {
				if r.TokensAt(now) >= candidateConnBurst {
					delete(t.conns, a)
				}
			}
			if len(t.conns) >= candidateConnsMax {
				return false
			}
		}
		r = rate.NewLimiter(candidateConnQPS, candidateConnBurst)
		t.conns[addr] = r
	}
	return r.AllowN(now, 1)
}

// holdNode waits until no other candidate claiming node is under review
// and marks one in progress; release ends it and lets the next waiter on.
func (t *TokenReview) holdNode(ctx context.Context, node string) (release func(), err error) {
	for {
		t.mu.Lock()
		busy, ok := t.nodes[node]
		if !ok {
			done := make(chan struct{})
			t.nodes[node] = done
			t.mu.Unlock()
			return func() {
				t.mu.Lock()
				delete(t.nodes, node)
				t.mu.Unlock()
				close(done)
			}, nil
		}
		t.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: token review: %w", ErrUnauthenticated, context.Cause(ctx))
		}
	}
}

// reviewIn reviews an unknown token in l's bounded queue and under its
// rate limit.
func (t *TokenReview) reviewIn(ctx context.Context, l *lane, token string) (Identity, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		t.total.WithLabelValues("overloaded").Inc()
		return Identity{}, fmt.Errorf("%w: %w: %d waiting", ErrUnauthenticated, ErrOverloaded, cap(l.slots))
	}
	defer func() { <-l.slots }()
	// Wait fails at once when the wait would pass ctx's deadline.
	if err := l.lim.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return Identity{}, fmt.Errorf("%w: token review: %w", ErrUnauthenticated, context.Cause(ctx))
		}
		t.total.WithLabelValues("overloaded").Inc()
		return Identity{}, fmt.Errorf("%w: %w: %w", ErrUnauthenticated, ErrOverloaded, err)
	}
	return t.review(ctx, token)
}

// finish publishes a review to its waiters and caches it: an accepted
// one until TTL or the token's expiry, whichever is first (and known
// until its expiry); a rejection for RejectTTL; a failed API call, a
// refusal for overload, or a review cut short by ctx not. A rejection of
// a known token (its pod deleted) forgets it.
func (t *TokenReview) finish(ctx context.Context, key [32]byte, token string, f *flight, id Identity, err error) {
	now := t.now()
	dropped := err != nil && ctx.Err() != nil
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inflight, key)
	f.id, f.err, f.dropped = id, err, dropped
	close(f.done)
	switch {
	case dropped:
		t.total.WithLabelValues("error").Inc()
	case err == nil:
		t.total.WithLabelValues("accepted").Inc()
		a := accepted{id: id, fresh: now.Add(t.cfg.TTL), known: now.Add(knownWithoutExpiry)}
		if exp, ok := TokenExpiry(token); ok {
			a.known = exp
			if exp.Before(a.fresh) {
				a.fresh = exp
			}
		}
		if !now.Before(a.fresh) {
			delete(t.cache, key)
			return
		}
		delete(t.rejected, key)
		if _, ok := t.cache[key]; !ok && len(t.cache) >= t.cfg.CacheMax {
			evictAccepted(t.cache, now, t.cfg.CacheMax)
		}
		t.cache[key] = a
	case isRejection(err):
		t.total.WithLabelValues("rejected").Inc()
		delete(t.cache, key)
		if len(t.rejected) >= t.cfg.RejectCacheMax {
			evictRejected(t.rejected, now, t.cfg.RejectCacheMax)
		}
		t.rejected[key] = rejected{err: err, expires: now.Add(t.cfg.RejectTTL)}
	case errors.Is(err, ErrOverloaded):
		// Counted where refused.
	default:
		t.total.WithLabelValues("error").Inc()
	}
}

// evictAccepted makes room for one more acceptance: it drops those no
// longer known, then those past their TTL (reviewed again anyway), then
// arbitrary ones (map order). Called with mu held.
func evictAccepted(m map[[32]byte]accepted, now time.Time, limit int) {
	for k, v := range m {
		if !now.Before(v.known) {
			delete(m, k)
		}
	}
	for k, v := range m {
		if len(m) < limit {
			return
		}
		if !now.Before(v.fresh) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < limit {
			return
		}
		delete(m, k)
	}
}

// evictRejected drops expired rejections, then arbitrary ones, until one
// more fits. Called with mu held.
func evictRejected(m map[[32]byte]rejected, now time.Time, limit int) {
	for k, v := range m {
		if !now.Before(v.expires) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < limit {
			return
		}
		delete(m, k)
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

// projectedClaims are the claims of a projected ServiceAccount token that
// matter here. Read without checking the signature, they route a token
// (or bound a cache entry of a token the API server accepted); they never
// authenticate it.
type projectedClaims struct {
	Sub  string   `json:"sub"`
	Exp  *float64 `json:"exp"`
	Aud  audience `json:"aud"`
	Kube struct {
		Namespace      string  `json:"namespace"`
		Node           *objRef `json:"node"`
		Pod            *objRef `json:"pod"`
		ServiceAccount *objRef `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

type objRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// audience is a JWT's "aud": one string or a list of them.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("aud: %w", err)
	}
	*a = list
	return nil
}

// decodeClaims decodes a JWT's payload into v, without checking anything;
// false when token is not a JWT or its payload not JSON of v's shape.
func decodeClaims(token string, v any) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return false
	}
	return json.Unmarshal(payload, v) == nil
}

// TokenExpiry returns the "exp" claim of a JWT, read without checking its
// signature: only for a token the API server has just accepted, whose
// claims it has checked. ok is false when the token is not a JWT or has
// no usable exp.
func TokenExpiry(token string) (exp time.Time, ok bool) {
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if !decodeClaims(token, &claims) || claims.Exp == nil {
		return time.Time{}, false
	}
	return expiry(*claims.Exp)
}

// expiry converts an "exp" claim, seconds since the epoch; anything
// outside what time.Unix can hold is not a usable expiry.
func expiry(e float64) (time.Time, bool) {
	if math.IsNaN(e) || e < 0 || e > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(int64(e), 0), true
}

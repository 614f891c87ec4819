package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeNameExtra is the user extra a pod-bound ServiceAccount token carries
// with the name of the pod's node.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// TokenReview authenticates projected ServiceAccount tokens with the
// TokenReview API. Reviews are cached briefly, keyed by the token's hash.
// It is safe for concurrent use.
type TokenReview struct {
	client    kubernetes.Interface
	audiences []string
	allowed   []string
	ttl       time.Duration
	now       func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	id      Identity
	err     error
	expires time.Time
}

const maxCache = 4096

// NewTokenReview returns an authenticator that accepts tokens for the
// given audiences (none: the API server's default) whose user is one of
// allowed, e.g. "system:serviceaccount:slingshot:slingshot-agent". ttl
// bounds how long a review is reused (0: 30 s).
func NewTokenReview(client kubernetes.Interface, audiences, allowed []string, ttl time.Duration) *TokenReview {
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &TokenReview{client: client, audiences: audiences, allowed: allowed, ttl: ttl, now: time.Now, cache: map[[32]byte]cached{}}
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
	now := t.now()
	t.mu.Lock()
	c, ok := t.cache[key]
	t.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.id, c.err
	}
	id, err := t.review(ctx, token)
	if ctx.Err() != nil {
		return id, err
	}
	t.mu.Lock()
	if len(t.cache) >= maxCache {
		for k, v := range t.cache {
			if !now.Before(v.expires) || len(t.cache) >= maxCache {
				delete(t.cache, k)
			}
		}
	}
	t.cache[key] = cached{id: id, err: err, expires: now.Add(t.ttl)}
	t.mu.Unlock()
	return id, err
}

func (t *TokenReview) review(ctx context.Context, token string) (Identity, error) {
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: t.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: token review: %w", ErrUnauthenticated, err)
	}
	if !tr.Status.Authenticated {
		return Identity{}, fmt.Errorf("%w: token rejected: %s", ErrUnauthenticated, tr.Status.Error)
	}
	user := tr.Status.User.Username
	if !slices.Contains(t.allowed, user) {
		return Identity{}, fmt.Errorf("%w: %s is not an agent service account", ErrForbidden, user)
	}
	id := Identity{User: user}
	if v := tr.Status.User.Extra[NodeNameExtra]; len(v) == 1 {
		id.Node = v[0]
	}
	return id, nil
}

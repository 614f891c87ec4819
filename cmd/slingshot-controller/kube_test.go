package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiServer answers TokenReviews (accepted) and reads of Lease ns/l, and
// counts each.
func apiServer(t *testing.T) (*rest.Config, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var reviews, leases atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			reviews.Add(1)
			out = &authnv1.TokenReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
				Status: authnv1.TokenReviewStatus{Authenticated: true}}
		case "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l":
			leases.Add(1)
			out = &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"}}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	rc := &rest.Config{Host: srv.URL, QPS: 200, Burst: 400, UserAgent: "slingshot-controller",
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}}
	return rc, &reviews, &leases
}

// Issue 15, item 9: TokenReviews run on a client of their own, so that
// when their rate limit is spent the leader election's Lease calls still
// go out at once. The review client's limit here allows one review and
// then one per 1000 s; a call that would wait past its context's deadline
// fails at once (client-go's limiter), so no test time passes. The shared
// case is the controller before item 9 (one clientset for both), which
// the test must catch.
func TestIssue15Item9ReviewClientSparesElection(t *testing.T) {
	tests := []struct {
		name    string
		clients func(*rest.Config, *Config) (review, election kubernetes.Interface, err error)
		delayed bool
	}{
		{"the controller's clients", func(rc *rest.Config, c *Config) (kubernetes.Interface, kubernetes.Interface, error) {
			kc, err := newKubeClients(rc, c)
			return kc.review, kc.election, err
		}, false},
		{"one shared client", func(rc *rest.Config, c *Config) (kubernetes.Interface, kubernetes.Interface, error) {
			cs, err := limitedClient(rc, "shared", float32(c.TokenReviewQPS), c.TokenReviewBurst)
			return cs, cs, err
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, reviews, leases := apiServer(t)
			c := &Config{TokenReviewQPS: 0.001, TokenReviewBurst: 1}
			review, election, err := tt.clients(rc, c)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "t"}}
			if _, err := review.AuthenticationV1().TokenReviews().Create(ctx, tr, metav1.CreateOptions{}); err != nil {
				t.Fatalf("first review: %v", err)
			}
			if _, err := review.AuthenticationV1().TokenReviews().Create(ctx, tr, metav1.CreateOptions{}); err == nil {
				t.Fatal("a second review went out at once: the review client's limit is not in force")
			}
			for i := range electionBurst {
				_, err := election.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
				if delayed := err != nil; delayed != tt.delayed {
					t.Fatalf("lease read %d after the reviews spent their limit: %v, want delayed %v", i, err, tt.delayed)
				}
				if tt.delayed {
					break
				}
			}
			if reviews.Load() != 1 {
				t.Fatalf("%d reviews reached the API server, want 1", reviews.Load())
			}
			if want := int64(electionBurst); !tt.delayed && leases.Load() != want {
				t.Fatalf("%d lease reads reached the API server, want %d", leases.Load(), want)
			}
		})
	}
}

func TestTokenReviewFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--token-review-qps", "0"}, "--token-review-qps"},
		{[]string{"--token-review-burst", "0"}, "--token-review-burst"},
		{[]string{"--token-review-cache-ttl", "0s"}, "--token-review-cache-ttl"},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args, env(nil), io.Discard)
		if tt.wantErr == "" {
			if err != nil || c.TokenReviewQPS != 2000 || c.TokenReviewBurst != 2000 || c.TokenReviewTTL != 30*time.Second {
				t.Errorf("defaults: %v %+v", err, c)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%v: %v, want an error naming %s", tt.args, err, tt.wantErr)
		}
	}
}

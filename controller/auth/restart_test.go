package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fleetServer is an API server that answers each TokenReview after about a
// millisecond (TokenReview is cheap: no etcd write). It accepts a token
// whose signature part is "sig" and whose claims name the agent's
// ServiceAccount and a node, as that node's agent, and rejects every
// other (junk, or a forged agent token: signature "forged"). It counts
// the reviews of each kind.
type fleetServer struct {
	agent, junk atomic.Int64
}

// newFleetServer returns the server and a client of it with client-go's
// own token-bucket rate limiter at qps and burst.
func newFleetServer(t *testing.T, qps float32, burst int) (*fleetServer, kubernetes.Interface) {
	t.Helper()
	s := &fleetServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The API server's work: a simulated latency, not a synchronization.
		time.Sleep(time.Millisecond)
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		if node, ok := fleetTokenNode(tr.Spec.Token); ok {
			s.agent.Add(1)
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
				Username: agentSA, Extra: map[string]authnv1.ExtraValue{NodeNameExtra: {node}}}}
		} else {
			s.junk.Add(1)
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: qps, Burst: burst,
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return s, cs
}

// fleetTokenNode is the fake API server's check of a token: genuine
// (signature "sig") and the agent's, on a node.
func fleetTokenNode(token string) (string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] != base64.RawURLEncoding.EncodeToString([]byte("sig")) {
		return "", false
	}
	var c projectedClaims
	if !decodeClaims(token, &c) || c.Sub != agentSA || c.Kube.Node == nil {
		return "", false
	}
	return c.Kube.Node.Name, true
}

// agentToken is the projected token of the agent pod on node, shaped as
// the kubelet's (claims of Kubernetes 1.30 and later); sig is its
// signature part, "sig" for a genuine one.
func agentToken(node, sig string, exp time.Time) string {
	claims := map[string]any{
		"aud": []string{"slingshot-controller"}, "exp": exp.Unix(), "iat": exp.Add(-time.Hour).Unix(),
		"iss": "https://kubernetes.default.svc", "sub": agentSA,
		"kubernetes.io": map[string]any{
			"namespace":      "slingshot",
			"node":           map[string]string{"name": node, "uid": "uid-" + node},
			"pod":            map[string]string{"name": "slingshot-agent-" + node, "uid": "pod-uid-" + node},
			"serviceaccount": map[string]string{"name": "slingshot-agent", "uid": "sa-uid"},
		},
	}
	b, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k1"}`)) + "." + enc(b) + "." + enc([]byte(sig))
}

// The goals: after a controller restart (or a leader change) every
// agent's token is unknown to it, and the agents must be back within
// 5 s (an agent's call attempt times out after 5 s), at 5,000 nodes
// (issue 25). Unknown tokens were all reviewed at a quarter of
// --token-review-qps (20: 5 reviews a second), so 5,000 agents took
// ~1,000 s, and an agent's first token waited with any junk. Every agent
// here makes one call with the agent's 5 s attempt timeout, all at once,
// through client-go's rate limiter at the controller's defaults, while
// 1,000 junk tokens arrive too: half opaque, half forged agent tokens
// claiming the agents' own nodes.
func TestIssue25RestartAuthenticatesFleet(t *testing.T) {
	for _, junk := range []int{0, 1000} {
		t.Run(fmt.Sprintf("junk=%d", junk), func(t *testing.T) { testRestart(t, 5000, junk) })
	}
}

func testRestart(t *testing.T, agents, junk int) {
	s, cs := newFleetServer(t, float32(DefaultReviewQPS), DefaultReviewBurst)
	tr := NewTokenReview(cs, TokenReviewConfig{Audiences: []string{"slingshot-controller"}, Allowed: []string{agentSA},
		ClientQPS: DefaultReviewQPS, ClientBurst: DefaultReviewBurst})
	exp := time.Now().Add(time.Hour)
	tokens := make([]string, agents)
	for i := range tokens {
		tokens[i] = agentToken(fmt.Sprintf("node-%05d", i), "sig", exp)
	}
	var junkOK atomic.Int64
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range junk {
		tok := junkToken(i)
		if i%2 == 1 {
			tok = agentToken(fmt.Sprintf("node-%05d", i%agents), "forged", exp)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := tr.Authenticate(withToken(ctx, tok)); err == nil {
				junkOK.Add(1)
			}
		})
	}
	var last atomic.Int64 // when the last agent was in, ns since start
	for i, tok := range tokens {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			id, err := tr.Authenticate(withToken(ctx, tok))
			if err == nil && id.Node != fmt.Sprintf("node-%05d", i) {
				err = fmt.Errorf("identity %+v", id)
			}
			if err != nil {
				errs <- fmt.Errorf("agent %d: %w", i, err)
				return
			}
			for d := int64(time.Since(start)); ; {
				l := last.Load()
				if d <= l || last.CompareAndSwap(l, d) {
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if failed == 0 {
			first = err
		}
		failed++
	}
	took := time.Duration(last.Load())
	t.Logf("%d agents, %d junk tokens: agents in after %s; %d agent reviews, %d junk reviews, %d agents refused",
		agents, junk, took.Round(time.Millisecond), s.agent.Load(), s.junk.Load(), failed)
	if failed > 0 {
		t.Fatalf("%d of %d agents not authenticated within their 5 s attempt, first: %v", failed, agents, first)
	}
	if junkOK.Load() != 0 {
		t.Fatalf("%d junk tokens authenticated", junkOK.Load())
	}
	if got := s.agent.Load(); got != int64(agents) {
		t.Fatalf("%d agent reviews, want %d: one per token", got, agents)
	}
}

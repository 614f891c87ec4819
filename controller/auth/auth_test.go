package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const agentSA = "system:serviceaccount:slingshot:slingshot-agent"

// reviewer answers TokenReviews from a table of token -> user, node.
func reviewer(t *testing.T, users map[string][2]string, calls *atomic.Int64) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		u, ok := users[tr.Spec.Token]
		out := tr.DeepCopy()
		if ok {
			out.Status.Authenticated = true
			out.Status.User.Username = u[0]
			if u[1] != "" {
				out.Status.User.Extra = map[string]authnv1.ExtraValue{NodeNameExtra: {u[1]}}
			}
		} else {
			out.Status.Error = "invalid token"
		}
		return true, out, nil
	})
	return cs
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
}

func TestTokenReview(t *testing.T) {
	var calls atomic.Int64
	cs := reviewer(t, map[string][2]string{"agent-tok": {agentSA, "n1"}, "other-tok": {"system:serviceaccount:default:x", ""}}, &calls)
	tr := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}})
	ctx := t.Context()
	id, err := tr.Authenticate(withToken(ctx, "agent-tok"))
	if err != nil || id.User != agentSA || id.Node != "n1" {
		t.Fatalf("agent: %+v %v", id, err)
	}
	if _, err := tr.Authenticate(withToken(ctx, "agent-tok")); err != nil || calls.Load() != 1 {
		t.Fatalf("cached review: %v, %d calls", err, calls.Load())
	}
	if _, err := tr.Authenticate(withToken(ctx, "other-tok")); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other service account: %v", err)
	}
	if _, err := tr.Authenticate(withToken(ctx, "bogus")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("bad token: %v", err)
	}
	if _, err := tr.Authenticate(ctx); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	bound := WithIdentity(ctx, id)
	if CheckNode(bound, "n1") != nil || !errors.Is(CheckNode(bound, "n2"), ErrForbidden) || CheckNode(ctx, "n2") != nil {
		t.Fatal("CheckNode")
	}
}

func TestMTLS(t *testing.T) {
	cert := func(cn string) *x509.Certificate { return &x509.Certificate{Subject: pkix.Name{CommonName: cn}} }
	ctxWith := func(chains [][]*x509.Certificate) context.Context {
		return peer.NewContext(t.Context(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: chains}}})
	}
	m := MTLS{Prefix: "slingshot-agent:"}
	id, err := m.Authenticate(ctxWith([][]*x509.Certificate{{cert("slingshot-agent:node-7")}}))
	if err != nil || id.Node != "node-7" {
		t.Fatalf("agent cert: %+v %v", id, err)
	}
	if _, err := m.Authenticate(ctxWith([][]*x509.Certificate{{cert("admin")}})); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other cert: %v", err)
	}
	if _, err := m.Authenticate(ctxWith(nil)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unverified: %v", err)
	}
	if _, err := m.Authenticate(t.Context()); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no peer: %v", err)
	}
}

// Issue 15, item 8: an identity is bound to the node its credential names
// (the token's node-name extra, the name after the certificate's prefix);
// one that names no node may act for none, unless AllowUnbound says so.
func TestIssue15Item8CheckNode(t *testing.T) {
	var calls atomic.Int64
	cs := reviewer(t, map[string][2]string{"bound": {agentSA, "n1"}, "unbound": {agentSA, ""}}, &calls)
	certCtx := func(cn string) context.Context {
		chain := [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}
		return peer.NewContext(t.Context(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: chain}}})
	}
	tokens := NewTokenReview(cs, TokenReviewConfig{Allowed: []string{agentSA}})
	certs := MTLS{Prefix: "slingshot-agent:"}
	tests := []struct {
		name  string
		authn Authenticator
		ctx   context.Context
		node  string
		want  error // nil: allowed
	}{
		{"token, own node", tokens, withToken(t.Context(), "bound"), "n1", nil},
		{"token, other node", tokens, withToken(t.Context(), "bound"), "n2", ErrWrongNode},
		{"token without node", tokens, withToken(t.Context(), "unbound"), "n1", ErrNoNode},
		{"token without node, allowed", AllowUnbound(tokens), withToken(t.Context(), "unbound"), "n2", nil},
		{"token with node, allowed unbound", AllowUnbound(tokens), withToken(t.Context(), "bound"), "n2", ErrWrongNode},
		{"certificate, own node", certs, certCtx("slingshot-agent:n1"), "n1", nil},
		{"certificate, other node", certs, certCtx("slingshot-agent:n1"), "n2", ErrWrongNode},
		{"certificate without node", certs, certCtx("slingshot-agent:"), "n1", ErrNoNode},
		{"certificate without node, allowed", AllowUnbound(certs), certCtx("slingshot-agent:"), "n1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := tt.authn.Authenticate(tt.ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckNode(WithIdentity(t.Context(), id), tt.node)
			if tt.want == nil && err != nil || tt.want != nil && (!errors.Is(err, tt.want) || !errors.Is(err, ErrForbidden)) {
				t.Fatalf("CheckNode(%+v, %q) = %v, want %v", id, tt.node, err, tt.want)
			}
		})
	}
	if err := CheckNode(t.Context(), "n1"); err != nil {
		t.Fatalf("no authenticator on the path (embedded, --auth none): %v", err)
	}
}

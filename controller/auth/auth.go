package auth

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnauthenticated is wrapped when the caller presents no valid
// credential; ErrForbidden when a valid one is not allowed. ErrWrongNode
// and ErrNoNode wrap ErrForbidden: the caller is bound to another node
// than the request names, or its credential names no node at all.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
	ErrWrongNode       = fmt.Errorf("%w: bound to another node", ErrForbidden)
	ErrNoNode          = fmt.Errorf("%w: credential names no node", ErrForbidden)
)

// Identity is an authenticated caller.
type Identity struct {
	// User is the Kubernetes user name or the certificate's common name.
	User string
	// Node is the node the caller is bound to: the node of the pod a
	// ServiceAccount token is bound to, or the name after a certificate's
	// prefix. Empty when the credential names none; such a caller may
	// make no node-scoped call, unless AnyNode.
	Node string
	// AnyNode lets a caller with no Node act for every node. Only
	// [AllowUnbound] sets it (the controller's development flag
	// --allow-unbound-agents): a stolen credential of such a caller can
	// release any node's holds and take any node's slices.
	AnyNode bool
}

// AllowUnbound returns an authenticator that accepts what a accepts and
// lets callers whose credential names no node act for every node. For
// development clusters whose tokens carry no node (Kubernetes before 1.30,
// or the ServiceAccountTokenPodNodeInfo feature off) or certificates
// without a node name; never for production.
func AllowUnbound(a Authenticator) Authenticator { return allowUnbound{a} }

type allowUnbound struct{ a Authenticator }

func (u allowUnbound) Authenticate(ctx context.Context) (Identity, error) {
	id, err := u.a.Authenticate(ctx)
	if err == nil && id.Node == "" {
		id.AnyNode = true
	}
	return id, err
}

// Authenticator authenticates one gRPC call from its context (metadata
// and peer). It returns errors wrapping ErrUnauthenticated or ErrForbidden.
type Authenticator interface {
	Authenticate(ctx context.Context) (Identity, error)
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the caller's identity, if authenticated.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// UnaryInterceptor refuses calls that a does not authenticate and passes
// the identity on in the context.
func UnaryInterceptor(a Authenticator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id, err := a.Authenticate(ctx)
		if err != nil {
			code := codes.Unauthenticated
			switch {
			case errors.Is(err, ErrForbidden):
				code = codes.PermissionDenied
			case errors.Is(err, ErrOverloaded):
				// Not an answer about the token: the agent retries.
				code = codes.Unavailable
			}
			return nil, status.Error(code, err.Error())
		}
		return h(WithIdentity(ctx, id), req)
	}
}

// CheckNode authorizes a call that acts for node: it returns an error
// wrapping ErrWrongNode when the caller is bound to another node, and
// ErrNoNode when its credential names no node (unless it may act for any,
// [AllowUnbound]). A context with no identity passes: no authenticator is
// on the path (the embedded controller, or the controller's --auth none).
func CheckNode(ctx context.Context, node string) error {
	id, ok := FromContext(ctx)
	switch {
	case !ok:
		return nil
	case id.Node == "" && id.AnyNode:
		return nil
	case id.Node == "":
		return fmt.Errorf("%w: caller %s may not act for node %q", ErrNoNode, id.User, node)
	case id.Node != node:
		return fmt.Errorf("%w: caller %s is bound to node %q, not %q", ErrWrongNode, id.User, id.Node, node)
	}
	return nil
}

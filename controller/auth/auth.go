package auth

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnauthenticated is wrapped when the caller presents no valid
// credential; ErrForbidden when a valid one is not allowed.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Identity is an authenticated caller.
type Identity struct {
	// User is the Kubernetes user name or the certificate's common name.
	User string
	// Node is the node the caller is bound to; empty when unknown, in
	// which case it may act for any node.
	Node string
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
			if errors.Is(err, ErrForbidden) {
				code = codes.PermissionDenied
			}
			return nil, status.Error(code, err.Error())
		}
		return h(WithIdentity(ctx, id), req)
	}
}

// CheckNode returns an error wrapping ErrForbidden when the caller is bound
// to a node other than node.
func CheckNode(ctx context.Context, node string) error {
	id, ok := FromContext(ctx)
	if !ok || id.Node == "" || id.Node == node {
		return nil
	}
	return errors.Join(ErrForbidden, errors.New("caller "+id.User+" is bound to node "+id.Node+", not "+node))
}

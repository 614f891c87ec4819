package auth

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// MTLS accepts callers whose client certificate the server's TLS config
// verified (tls.RequireAndVerifyClientCert with the agents' CA) and whose
// common name starts with Prefix; the rest of the name, if any, is the
// node the caller is bound to. With Prefix "slingshot-agent:", the
// certificate "slingshot-agent:node-7" may act for node-7 only.
type MTLS struct {
	Prefix string
}

// Authenticate implements [Authenticator].
func (m MTLS) Authenticate(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, fmt.Errorf("%w: no peer", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Identity{}, fmt.Errorf("%w: no verified client certificate", ErrUnauthenticated)
	}
	cn := info.State.VerifiedChains[0][0].Subject.CommonName
	node, ok := strings.CutPrefix(cn, m.Prefix)
	if !ok {
		return Identity{}, fmt.Errorf("%w: certificate %q lacks the prefix %q", ErrForbidden, cn, m.Prefix)
	}
	return Identity{User: cn, Node: node}, nil
}

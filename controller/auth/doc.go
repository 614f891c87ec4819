// Package auth decides who may call the controller's gRPC API: node agents
// only. Two authenticators exist: [TokenReview] checks a projected
// ServiceAccount token (the "authorization: Bearer" metadata) with the
// Kubernetes TokenReview API and accepts the listed service accounts; [MTLS]
// accepts client certificates that the server's TLS config verified and
// whose common name carries the configured prefix.
//
// Every caller is bound to a node: the node of the pod a token is bound to
// (the TokenReview's node-name extra), or the name after the certificate's
// prefix (CN "slingshot-agent:<node>"). [CheckNode] refuses a call for
// another node, and any node-scoped call by a caller whose credential names
// no node, unless [AllowUnbound] (a development switch) wraps the
// authenticator.
//
// TokenReview gives each token one review at a time, however many calls
// carry it, and reuses an accepted review for a short TTL that never
// passes the token's expiry. Give it a Kubernetes client of its own, so
// that a burst of reviews cannot delay other calls (the leader election's).
// Any pod can reach the port and present random tokens: acceptances are
// cached apart from rejections, which cannot evict them, and tokens never
// accepted before are reviewed under rate limits and bounded queues of
// their own, which an agent renewing its review does not wait in: one
// for agent candidates (tokens whose unverified claims are an agent's
// projected token; every agent's after a controller restart), reviewed
// one per claimed node at a time, and a small one for everything else.
//
// The embedded mode calls the controller in-process and needs none of this.
package auth

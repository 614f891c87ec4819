// Package auth decides who may call the controller's gRPC API: node agents
// only. Two authenticators exist: [TokenReview] checks a projected
// ServiceAccount token (the "authorization: Bearer" metadata) with the
// Kubernetes TokenReview API and accepts the listed service accounts; [MTLS]
// accepts client certificates that the server's TLS config verified and
// whose common name carries the configured prefix. Both can bind a caller
// to its node (the token's node-name extra, or the name after the
// certificate prefix), and the API then refuses requests for other nodes.
//
// The embedded mode calls the controller in-process and needs none of this.
package auth

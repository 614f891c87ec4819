package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// maxAgentsTracked bounds AgentVersions' memory: past it (a cluster this
// large, or junk node names under --auth none) everything is forgotten
// and each node is logged once more.
const maxAgentsTracked = 1 << 16

// maxNodeName is a Kubernetes node name's longest (a DNS subdomain); a
// longer one is no node, and is not remembered.
const maxNodeName = 253

// AgentVersions logs the version of each agent that calls the API: once
// per node, and again when a node's agent changes version (an upgrade or
// a rollback), with a warning for an agent outside the version-skew
// policy ([version.CheckSkew]). The version is the agent's gRPC user
// agent ([version.UserAgent]), not a message field: the wire API changes
// only additively, and an agent older than 0.2.0 sends none ("unknown").
// Safe for concurrent use.
type AgentVersions struct {
	log *slog.Logger
	own string

	mu   sync.Mutex
	seen map[string]string // node → the version last logged
}

// NewAgentVersions logs to log, the controller being of release own.
func NewAgentVersions(log *slog.Logger, own string) *AgentVersions {
	return &AgentVersions{log: log, own: own, seen: map[string]string{}}
}

// nodeScoped is every request that acts for one node (the generated
// messages' getter).
type nodeScoped interface{ GetNode() string }

// UnaryInterceptor observes every node-scoped call whose caller may act
// for its node: it goes after the authentication interceptor, so that a
// caller cannot log versions in another node's name. It changes nothing
// of the call.
func (a *AgentVersions) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(nodeScoped); ok {
			if node := r.GetNode(); node != "" && len(node) <= maxNodeName && auth.CheckNode(ctx, node) == nil {
				a.Observe(node, agentVersion(ctx))
			}
		}
		return handler(ctx, req)
	}
}

// VersionHeader tells every caller the controller's release, own, in
// the response header [version.ControllerHeader]: an agent that refuses
// an answer it does not understand names both releases (the wire API
// stays as it is, and older agents ignore the header). It goes first in
// the chain, so that answers that refuse the call carry it too.
func VersionHeader(own string) grpc.UnaryServerInterceptor {
	md := metadata.Pairs(version.ControllerHeader, own)
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// SetHeader fails only where no header can be sent any more (the
		// call is over): the agent then misses only the version, and the
		// call is no business of this interceptor's.
		_ = grpc.SetHeader(ctx, md)
		return handler(ctx, req)
	}
}

// UnknownMethod answers a call of a method this controller, of release
// own, does not serve, with Unimplemented naming the method and both
// releases (the caller's from its user agent, version.Unknown without
// one), and the controller's release in the header as [VersionHeader]
// does: what an agent of a later release meets when it asks an earlier
// controller for what the later one added. Serve it with
// grpc.UnknownServiceHandler. It runs before any interceptor (gRPC calls
// no unary interceptor for a method it does not know), so it answers
// unauthenticated callers too, with nothing but what /metrics shows
// (slingshot_build_info).
func UnknownMethod(own string) grpc.StreamHandler {
	md := metadata.Pairs(version.ControllerHeader, own)
	return func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		// As in VersionHeader: a header that cannot be sent costs only
		// the version.
		_ = stream.SetHeader(md)
		return status.Errorf(codes.Unimplemented,
			"this controller does not serve %s (controller %s, agent %s): the controller is upgraded before the agents (docs/upgrade.md)",
			method, own, agentVersion(stream.Context()))
	}
}

// agentVersion is the calling agent's version from its user agent, or
// version.Unknown.
func agentVersion(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, ua := range md.Get("user-agent") {
		if v, ok := version.FromUserAgent(ua, version.AgentProduct); ok {
			return v
		}
	}
	return version.Unknown
}

// Observe records that node's agent is of version v, and logs it where
// it is new for the node.
func (a *AgentVersions) Observe(node, v string) {
	a.mu.Lock()
	prev, known := a.seen[node]
	if known && prev == v {
		a.mu.Unlock()
		return
	}
	if !known && len(a.seen) >= maxAgentsTracked {
		clear(a.seen)
	}
	a.seen[node] = v
	a.mu.Unlock()

	if known {
		a.log.Info("agent version changed", "node", node, "version", v, "previous", prev)
	} else {
		a.log.Info("agent connected", "node", node, "version", v)
	}
	if err := version.CheckSkew(a.own, v); errors.Is(err, version.ErrSkew) {
		a.log.Warn("agent outside the version-skew policy (docs/upgrade.md)", "node", node, "version", v,
			"controller_version", a.own, "err", err)
	}
}

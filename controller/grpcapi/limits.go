package grpcapi

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Limits bound what one client, and all of them together, can take of the
// agents' gRPC server. The port is reachable from every pod, and each
// call with a new token costs a TokenReview: one pod must not take every
// connection, nor make calls faster than authentication can refuse them.
type Limits struct {
	// MaxConnections bounds the open connections of all clients; a
	// connection beyond it is closed at once. 0: no bound.
	MaxConnections int
	// MaxConnectionsPerHost bounds the open connections from one remote
	// IP address (an agent needs one). 0: no bound.
	MaxConnectionsPerHost int
	// MaxStreams bounds the concurrent calls on one connection.
	MaxStreams uint32
	// CallsPerSecond and CallBurst bound the calls of one connection,
	// checked before authentication; a call beyond them is answered
	// Unavailable, which an agent retries. 0: no bound.
	CallsPerSecond float64
	CallBurst      int
}

// DefaultLimits are the controller's defaults: an agent holds one
// connection and makes a few calls a second, hundreds while a node starts
// a burst of pods; a connection with junk tokens is held back mostly by
// the authenticator's own bound on unknown tokens, this rate bounds the
// work of refusing them.
var DefaultLimits = Limits{MaxConnections: 16384, MaxConnectionsPerHost: 8, MaxStreams: 64, CallsPerSecond: 1000, CallBurst: 2000}

// Keepalive enforcement: an agent pings every 30 s
// (controllerclient), so a client pinging more often than every 20 s is
// misbehaving and is sent away; a connection idle for 5 minutes is closed
// (an agent reconnects at its next call), so that idle connections do not
// hold slots; a handshake must finish within 10 s, so that a client that
// opens connections and sends nothing holds a slot only briefly.
const (
	keepaliveMinTime  = 20 * time.Second
	maxConnectionIdle = 5 * time.Minute
	handshakeTimeout  = 10 * time.Second
)

// Limiter enforces [Limits]: [Limiter.Listener] the connection counts,
// [Limiter.ServerOptions] the per-connection stream bound and keepalive
// enforcement, [Limiter.UnaryInterceptor] the per-connection call rate.
// It is safe for concurrent use.
type Limiter struct {
	lim     Limits
	refused *prometheus.CounterVec

	mu      sync.Mutex
	total   int
	perHost map[string]int
	// calls is the call rate limiter of each open connection, by its
	// remote address (host:port names one connection).
	calls map[string]*rate.Limiter
}

// NewLimiter returns a Limiter of lim; reg, when not nil, gets
// slingshot_controller_grpc_limited_total{reason}.
func NewLimiter(lim Limits, reg prometheus.Registerer) *Limiter {
	l := &Limiter{lim: lim, perHost: map[string]int{}, calls: map[string]*rate.Limiter{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_grpc_limited_total",
			Help: "Connections closed and calls refused by the gRPC server's limits, by reason: connections, connections_per_host, call_rate.",
		}, []string{"reason"})}
	// Every reason starts at 0: the first refusal is then an increase
	// that rate() sees.
	for _, r := range []string{"connections", "connections_per_host", "call_rate"} {
		l.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(l.refused)
	}
	return l
}

// ServerOptions returns the grpc.Server options of the limits.
func (l *Limiter) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: maxConnectionIdle}),
		grpc.ConnectionTimeout(handshakeTimeout),
	}
	if l.lim.MaxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.lim.MaxStreams))
	}
	return opts
}

// UnaryInterceptor refuses, with Unavailable, a call beyond its
// connection's rate. Put it before authentication, so that refused calls
// cost no review.
func (l *Limiter) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			l.mu.Lock()
			r := l.calls[p.Addr.String()]
			l.mu.Unlock()
			if r != nil && !r.Allow() {
				l.refused.WithLabelValues("call_rate").Inc()
				return nil, status.Errorf(codes.Unavailable, "more than %g calls per second on this connection", l.lim.CallsPerSecond)
			}
		}
		return h(ctx, req)
	}
}

// Listener returns inner with the connection bounds: Accept closes a
// connection beyond them at once and waits for the next.
func (l *Limiter) Listener(inner net.Listener) net.Listener {
	return &limitListener{Listener: inner, l: l}
}

type limitListener struct {
	net.Listener
	l *Limiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ll.l.admit(c); lc != nil {
			return lc, nil
		}
		// Refused: closed, and the loop waits for the next one. Accept
		// returns no error for it: grpc.Server.Serve stops on one.
		_ = c.Close()
	}
}

// admit counts c in, or returns nil when it is beyond a bound.
func (l *Limiter) admit(c net.Conn) net.Conn {
	host := remoteHost(c.RemoteAddr())
	addr := ""
	if a := c.RemoteAddr(); a != nil {
		addr = a.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lim.MaxConnections > 0 && l.total >= l.lim.MaxConnections:
		l.refused.WithLabelValues("connections").Inc()
		return nil
	case l.lim.MaxConnectionsPerHost > 0 && l.perHost[host] >= l.lim.MaxConnectionsPerHost:
		l.refused.WithLabelValues("connections_per_host").Inc()
		return nil
	}
	l.total++
	l.perHost[host]++
	if l.lim.CallsPerSecond > 0 && addr != "" {
		l.calls[addr] = rate.NewLimiter(rate.Limit(l.lim.CallsPerSecond), max(1, l.lim.CallBurst))
	}
	return &limitConn{Conn: c, l: l, host: host, addr: addr}
}

func (l *Limiter) release(host, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perHost[host]--; l.perHost[host] <= 0 {
		delete(l.perHost, host)
	}
	delete(l.calls, addr)
}

// remoteHost is a connection's remote IP address, or its whole address
// where it has none (a unix socket).
func remoteHost(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// limitConn gives its slot back once, on its first Close.
type limitConn struct {
	net.Conn
	l          *Limiter
	host, addr string
	once       sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() { c.l.release(c.host, c.addr) })
	return c.Conn.Close()
}

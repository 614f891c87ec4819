package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/bindcond"
	"github.com/slingshot-k8s/slingshot/controller/claimstatus"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/hooks"
	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/internal/buildinfo"
	"github.com/slingshot-k8s/slingshot/internal/version"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// follower is a store that can keep a copy of itself (kube.Store).
type follower interface {
	Follow(ctx context.Context) error
}

// errLeadershipLost ends the program when this replica stops leading
// while it runs; its exit status is non-zero, so the kubelet restarts it.
var errLeadershipLost = errors.New("leadership lost")

func newLogger(c *Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// run serves until ctx ends or a component fails: it builds every part
// first, so that every error of building comes before anything starts.
func run(ctx context.Context, c *Config, logw io.Writer) error {
	p, err := build(ctx, c, newLogger(c, logw))
	defer p.close()
	if err != nil {
		return err
	}
	return p.run(ctx)
}

// parts is the controller, built: every component made and every
// listener open, nothing serving yet.
type parts struct {
	c   *Config
	log *slog.Logger
	reg *prometheus.Registry

	resolver controller.Resolver
	parents  hooks.Parents
	nodes    *owner.NodeWatcher  // nil without the Kubernetes API
	claims   *claimstatus.Writer // nil without the Kubernetes API
	binding  *bindcond.Writer    // nil without --dra-binding-conditions
	kc       kubeClients
	rc       *rest.Config

	st  store.Store
	cc  controller.Config
	svc *controller.Allocator
	el  *leader.Elector // nil without --leader-elect

	gs        *grpc.Server
	glis      net.Listener
	servers   []*http.Server
	listeners []net.Listener // listeners[i] is servers[i]'s
}

// close releases what building opened: the listeners (closed already
// where their servers ran) and the store.
func (p *parts) close() {
	if p.glis != nil {
		p.glis.Close()
	}
	for _, l := range p.listeners {
		l.Close()
	}
	if p.st != nil {
		p.st.Close()
	}
}

// build makes every part of the controller from its configuration. On
// error, the parts made so far are returned for closing.
func build(ctx context.Context, c *Config, log *slog.Logger) (*parts, error) {
	p := &parts{c: c, log: log, reg: prometheus.NewRegistry()}
	bi := version.Get()
	log.Info("slingshot-controller", "version", bi.Version, "commit", bi.Commit, "build_date", bi.BuildDate, "go_version", bi.GoVersion)
	p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.NewCollector(bi))
	steps := []func(context.Context) error{p.buildKube, p.buildService, p.buildGRPC, p.buildHTTP, p.buildElection}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return p, err
		}
	}
	return p, nil
}

// buildKube makes the Kubernetes clients, the owner resolver and the node
// watcher, unless --no-kube.
func (p *parts) buildKube(context.Context) error {
	if p.c.NoKube {
		return nil
	}
	var err error
	if p.rc, err = kubeConfig(p.c.Kubeconfig, p.c.APIQPS, p.c.APIBurst); err != nil {
		return err
	}
	if p.kc, err = newKubeClients(p.rc, p.c); err != nil {
		return err
	}
	md, err := metadata.NewForConfig(p.rc)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	r := owner.NewResolver(md, p.c.kinds)
	p.resolver, p.parents = r, r
	p.nodes = owner.NewNodeWatcher(p.kc.main, nil)
	// Its own client of rc, so its own bucket of --api-qps: a load's
	// status reads cannot hold up the owner look-ups of acquires.
	sc, err := claimstatus.NewKubeClient(p.rc)
	if err != nil {
		return err
	}
	p.claims = claimstatus.New(sc, claimstatus.Options{Logger: p.log, Registerer: p.reg})
	return nil
}

// buildService opens the store and makes the allocator on it.
func (p *parts) buildService(ctx context.Context) error {
	coll, err := p.c.HWColl.collectives()
	if err != nil {
		return err
	}
	if p.st, err = openStore(ctx, p.c, p.rc, p.log); err != nil {
		return err
	}
	p.cc = p.c.controller
	p.cc.Logger, p.cc.Registerer = p.log, p.reg
	p.cc.Collectives = coll
	if p.cc.Collectives != nil {
		p.log.Info("hardware collectives enabled", "fm_url", p.c.HWColl.FMURL, "oauth", p.c.HWColl.OAuthDir != "",
			"mtls", p.c.HWColl.CertFile != "", "addrs_per_job", p.c.HWColl.AddrsPerJob, "job_prefix", p.c.HWColl.JobPrefix)
	}
	var nd controller.NodeDirectory
	if p.nodes != nil {
		nd = p.nodes
	}
	if p.claims != nil {
		p.cc.Claims = p.claims
	}
	if p.svc, err = controller.New(p.st, p.resolver, nd, p.cc); err != nil {
		return err
	}
	return p.buildBinding()
}

// buildBinding makes the writer of the DRA claims' binding conditions,
// with --dra-binding-conditions: it leases through the allocator.
func (p *parts) buildBinding() error {
	driver := p.c.DRABindingConditions
	if driver == "" {
		return nil
	}
	var err error
	p.binding, err = bindcond.New(p.kc.main, p.svc, bindcond.APIConditions{Client: p.kc.main, Driver: driver},
		bindcond.Options{Driver: driver, NodeStale: p.c.DRANodeStale, GroupClaims: p.c.DRAPodGroupClaims, Logger: p.log.With("component", "binding-conditions"), Registerer: p.reg})
	return err
}

// buildGRPC makes the agents' gRPC server, its authentication and TLS,
// and opens its listener.
func (p *parts) buildGRPC(context.Context) error {
	c, log := p.c, p.log
	// Every pod reaches the port: the limits come before authentication,
	// so that calls they refuse cost no TokenReview.
	lim := grpcapi.NewLimiter(grpcapi.Limits{MaxConnections: c.GRPCMaxConnections, MaxConnectionsPerHost: c.GRPCMaxConnectionsPerHost,
		MaxStreams: grpcapi.DefaultLimits.MaxStreams, CallsPerSecond: c.GRPCCallsPerSecond, CallBurst: int(2 * c.GRPCCallsPerSecond)}, p.reg)
	gopts := lim.ServerOptions()
	// The controller's version goes on every answer, refusals too.
	interceptors := []grpc.UnaryServerInterceptor{grpcapi.VersionHeader(version.Version), grpcapi.MetricsInterceptor(p.reg), lim.UnaryInterceptor()}
	var authn auth.Authenticator
	switch c.Auth {
	case "tokenreview":
		// Tokens never accepted before take shares of the client's rate:
		// those shaped as an agent's (every agent's after a restart) three
		// quarters, others (anyone's junk) a hundredth, so that neither
		// can take what the known agents' renewals need.
		authn = auth.NewTokenReview(p.kc.review, auth.TokenReviewConfig{Audiences: splitList(c.TokenAudiences),
			Allowed: splitList(c.AgentServiceAccounts), TTL: c.TokenReviewTTL, Registerer: p.reg,
			ClientQPS: c.TokenReviewQPS, ClientBurst: c.TokenReviewBurst})
	case "mtls":
		authn = auth.MTLS{Prefix: c.MTLSPrefix}
	default:
		log.Warn("agents are not authenticated (--auth none)")
	}
	if authn != nil && c.AllowUnboundAgents {
		log.Warn("agents whose credential names no node may act for every node (--allow-unbound-agents)")
		authn = auth.AllowUnbound(authn)
	}
	if authn != nil {
		interceptors = append(interceptors, auth.UnaryInterceptor(authn))
	}
	// After authentication: only a caller bound to a node logs its agent's version.
	interceptors = append(interceptors, grpcapi.NewAgentVersions(log, version.Version).UnaryInterceptor())
	if c.TLSCert != "" {
		tc, err := serverTLS(c)
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gopts = append(gopts, grpc.ChainUnaryInterceptor(interceptors...),
		// A later agent's call of a method this release lacks is refused
		// naming both releases.
		grpc.UnknownServiceHandler(grpcapi.UnknownMethod(version.Version)))
	p.gs = grpc.NewServer(gopts...)
	grpcapi.NewServer(p.svc, p.cc.SliceTTL, grpcapi.WithRegisterer(p.reg)).Register(p.gs)

	// Listen before loading, so early callers get Unavailable rather
	// than connection refused.
	glis, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.GRPCAddr, err)
	}
	p.glis = lim.Listener(glis)
	return nil
}

// buildHTTP makes the hooks' and the metrics' HTTP servers, where their
// addresses are set, and opens their listeners.
func (p *parts) buildHTTP(context.Context) error {
	c := p.c
	if c.HooksAddr != "" {
		var followed []hooks.GroupKind
		for _, k := range c.kinds {
			followed = append(followed, hooks.GroupKind{Group: k.Group, Kind: k.Kind})
		}
		if p.parents == nil {
			p.log.Warn("the hooks cannot confirm their requests without a Kubernetes API (--no-kube) and act on any body: keep --hooks-addr unreachable to untrusted clients", "addr", c.HooksAddr)
		}
		if err := p.listenHTTP(c.HooksAddr, hooks.New(p.svc, p.parents, followed, p.log, p.reg)); err != nil {
			return err
		}
	}
	if c.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{Registry: p.reg}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !p.svc.Ready() {
				http.Error(w, "loading state", http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		})
		if err := p.listenHTTP(c.MetricsAddr, mux); err != nil {
			return err
		}
	}
	return nil
}

// listenHTTP makes an HTTP server of h and opens its listener on addr.
func (p *parts) listenHTTP(addr string, h http.Handler) error {
	s := newHTTPServer(h)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	p.servers = append(p.servers, s)
	p.listeners = append(p.listeners, l)
	return nil
}

// buildElection makes the leader elector, with --leader-elect.
func (p *parts) buildElection(context.Context) error {
	if !p.c.LeaderElect {
		return nil
	}
	var err error
	if p.el, err = leader.New(p.kc.election.CoordinationV1(), p.c.election(p.c.StoreNamespace)); err != nil {
		return err
	}
	p.log.Info("leader election", "lease", p.c.StoreNamespace+"/slingshot-controller", "identity", p.c.Identity)
	return nil
}

// run serves the built controller until ctx ends or a loop fails, each
// loop owned by one errgroup; the first failure is the error returned.
func (p *parts) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return failed(gctx, "controller", p.runService(gctx, cancel)) })
	if p.nodes != nil {
		g.Go(func() error { return failed(gctx, "node watcher", p.nodes.Run(gctx)) })
	}
	if p.claims != nil {
		// It writes only while this replica's state is loaded (it
		// leads), and is told of every load: at start, at a takeover.
		g.Go(func() error { return failed(gctx, "vniclaim status", p.claims.Run(gctx, p.svc)) })
	}
	if p.binding != nil {
		// It leases only once this replica's state is loaded (it leads).
		g.Go(func() error { return failed(gctx, "binding conditions", p.binding.Run(gctx)) })
	}
	// A replica that may lead keeps a copy of the kube store from its
	// start (a warm standby), so that a takeover reads no full list.
	if f, ok := p.st.(follower); ok && p.c.LeaderElect {
		g.Go(func() error { return failed(gctx, "store follower", f.Follow(gctx)) })
	}
	g.Go(func() error { return failed(gctx, "grpc", p.gs.Serve(p.glis)) })
	p.log.Info("serving grpc", "addr", p.glis.Addr().String())
	for i, s := range p.servers {
		l := p.listeners[i]
		p.log.Info("serving http", "addr", l.Addr().String())
		g.Go(func() error {
			if err := s.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return failed(gctx, "http "+l.Addr().String(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		select {
		case <-p.svc.Loaded():
			p.log.Info("state loaded; answering requests")
		case <-gctx.Done():
		}
		return nil
	})
	g.Go(func() error { p.shutdown(gctx); return nil })
	g.Wait()
	if cause := context.Cause(gctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// failed is a loop's error named for the loop, or nil once ctx has ended:
// what a loop returns then is the end's echo, not a failure.
func failed(ctx context.Context, name string, err error) error {
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// runService runs the allocator, while this replica leads where there is
// an election. Losing leadership while running ends ctx through lost.
func (p *parts) runService(ctx context.Context, lost context.CancelCauseFunc) error {
	if p.el == nil {
		return p.svc.Run(ctx)
	}
	return p.el.Run(ctx, func(lctx context.Context) error {
		err := p.svc.Run(lctx)
		if ctx.Err() == nil {
			// Leadership lost while running: exit, so that the
			// agents' connections to this replica close and they
			// reconnect, through the Service, to the new leader;
			// the restarted process campaigns again.
			lost(failed(ctx, "controller", errors.Join(errLeadershipLost, err)))
		}
		return err
	})
}

// shutdown stops the servers once ctx ends: gRPC gracefully for up to
// five seconds, then at once.
func (p *parts) shutdown(ctx context.Context) {
	<-ctx.Done()
	p.log.Info("shutting down", "cause", context.Cause(ctx))
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	stopped := make(chan struct{})
	go func() { p.gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		p.gs.Stop()
	}
	for _, s := range p.servers {
		s.Shutdown(sctx)
	}
}

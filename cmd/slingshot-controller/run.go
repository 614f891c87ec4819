package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/hooks"
	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

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

// run serves until ctx ends or a component fails.
func run(ctx context.Context, c *Config, logw io.Writer) error {
	log := newLogger(c, logw)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var (
		resolver controller.Resolver
		parents  hooks.Parents
		nodes    *owner.NodeWatcher
		kc       kubeClients
		rc       *rest.Config
	)
	if !c.NoKube {
		var err error
		if rc, err = kubeConfig(c.Kubeconfig); err != nil {
			return err
		}
		if kc, err = newKubeClients(rc, c); err != nil {
			return err
		}
		md, err := metadata.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("metadata client: %w", err)
		}
		r := owner.NewResolver(md, c.kinds)
		resolver, parents = r, r
		nodes = owner.NewNodeWatcher(kc.main, nil)
	}
	st, err := openStore(ctx, c, rc, log)
	if err != nil {
		return err
	}
	defer st.Close()
	cc := c.controller
	cc.Logger, cc.Registerer = log, reg
	var nd controller.NodeDirectory
	if nodes != nil {
		nd = nodes
	}
	svc, err := controller.New(st, resolver, nd, cc)
	if err != nil {
		return err
	}

	gopts := []grpc.ServerOption{}
	interceptors := []grpc.UnaryServerInterceptor{grpcapi.MetricsInterceptor(reg)}
	var authn auth.Authenticator
	switch c.Auth {
	case "tokenreview":
		authn = auth.NewTokenReview(kc.review, auth.TokenReviewConfig{Audiences: splitList(c.TokenAudiences),
			Allowed: splitList(c.AgentServiceAccounts), TTL: c.TokenReviewTTL, Registerer: reg})
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
	if c.TLSCert != "" {
		tc, err := serverTLS(c)
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gopts = append(gopts, grpc.ChainUnaryInterceptor(interceptors...))
	gs := grpc.NewServer(gopts...)
	grpcapi.NewServer(svc, cc.SliceTTL, grpcapi.WithRegisterer(reg)).Register(gs)

	// Listen before loading, so early callers get Unavailable rather
	// than connection refused.
	glis, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.GRPCAddr, err)
	}
	var servers []*http.Server
	var listeners []net.Listener
	if c.HooksAddr != "" {
		var followed []hooks.GroupKind
		for _, k := range c.kinds {
			followed = append(followed, hooks.GroupKind{Group: k.Group, Kind: k.Kind})
		}
		if parents == nil {
			log.Warn("the hooks cannot confirm their requests without a Kubernetes API (--no-kube) and act on any body: keep --hooks-addr unreachable to untrusted clients", "addr", c.HooksAddr)
		}
		servers = append(servers, newHTTPServer(hooks.New(svc, parents, followed, log, reg)))
		l, err := net.Listen("tcp", c.HooksAddr)
		if err != nil {
			glis.Close()
			return fmt.Errorf("listen %s: %w", c.HooksAddr, err)
		}
		listeners = append(listeners, l)
	}
	if c.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !svc.Ready() {
				http.Error(w, "loading state", http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		})
		servers = append(servers, newHTTPServer(mux))
		l, err := net.Listen("tcp", c.MetricsAddr)
		if err != nil {
			glis.Close()
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("listen %s: %w", c.MetricsAddr, err)
		}
		listeners = append(listeners, l)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	fail := func(name string, err error) {
		if err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("%s: %w", name, err))
		}
	}
	if c.LeaderElect {
		el, err := leader.New(kc.election.CoordinationV1(), c.election(c.StoreNamespace))
		if err != nil {
			return err
		}
		log.Info("leader election", "lease", c.StoreNamespace+"/slingshot-controller", "identity", c.Identity)
		wg.Go(func() {
			fail("controller", el.Run(ctx, func(lctx context.Context) error {
				err := svc.Run(lctx)
				if ctx.Err() == nil {
					// Leadership lost while running: exit, so that the
					// agents' connections to this replica close and they
					// reconnect, through the Service, to the new leader;
					// the restarted process campaigns again.
					fail("controller", errors.Join(errLeadershipLost, err))
				}
				return err
			}))
		})
	} else {
		wg.Go(func() { fail("controller", svc.Run(ctx)) })
	}
	if nodes != nil {
		wg.Go(func() { fail("node watcher", nodes.Run(ctx)) })
	}
	wg.Go(func() { fail("grpc", gs.Serve(glis)) })
	log.Info("serving grpc", "addr", glis.Addr().String())
	for i, s := range servers {
		l := listeners[i]
		log.Info("serving http", "addr", l.Addr().String())
		wg.Go(func() {
			if err := s.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				fail("http "+l.Addr().String(), err)
			}
		})
	}
	go func() {
		select {
		case <-svc.Loaded():
			log.Info("state loaded; answering requests")
		case <-ctx.Done():
		}
	}()

	<-ctx.Done()
	log.Info("shutting down", "cause", context.Cause(ctx))
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	for _, s := range servers {
		s.Shutdown(sctx)
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

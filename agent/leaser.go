package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// timedLeaser measures the controller calls of the pod path.
type timedLeaser struct {
	engine.Leaser
	m *metrics
}

func (t timedLeaser) AcquireJobVNI(ctx context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	start := t.m.now()
	l, err := t.Leaser.AcquireJobVNI(ctx, pod)
	t.m.controllerCalls.WithLabelValues("acquire", result(err)).Observe(t.m.now().Sub(start).Seconds())
	return l, err
}

func (t timedLeaser) ReleaseJobVNI(ctx context.Context, l controllerclient.Lease) error {
	start := t.m.now()
	err := t.Leaser.ReleaseJobVNI(ctx, l)
	t.m.controllerCalls.WithLabelValues("release", result(err)).Observe(t.m.now().Sub(start).Seconds())
	return err
}

// EmbeddedController is the controller that --controller=embedded runs
// in-process (package controller/embedded is one): the agent calls it
// through API, runs Run beside its client, and Closes it after Run
// returned.
type EmbeddedController interface {
	API() apiv1.ControllerClient
	Run(ctx context.Context) error
	Close() error
}

// EmbeddedOpener opens the embedded controller with its state in dir.
// The agent's main sets [Options.EmbeddedController] to one only in a
// binary built to carry the controller and its database.
type EmbeddedOpener func(ctx context.Context, dir string, logger *slog.Logger, reg prometheus.Registerer) (EmbeddedController, error)

// ErrNoEmbeddedController is returned for --controller=embedded when
// Options.EmbeddedController is nil.
var ErrNoEmbeddedController = errors.New(`--controller=embedded: this slingshot-agent was built without the embedded controller ` +
	`(build it with -tags embedded_controller), give the cluster controller's host:port instead`)

// controllerLink is the agent's controller client and, in embedded mode,
// the controller it calls: Run runs both until ctx ends or the controller
// fails; Close closes the client, then the controller.
type controllerLink struct {
	*controllerclient.Client
	embedded EmbeddedController // nil for a remote controller
}

// Run runs the client's heartbeats and refills, and the embedded
// controller; it returns nil when ctx ends, or the controller's error.
func (l *controllerLink) Run(ctx context.Context) error {
	if l.embedded == nil {
		return l.Client.Run(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return l.embedded.Run(gctx) })
	g.Go(func() error { return l.Client.Run(gctx) })
	if err := g.Wait(); err != nil {
		return fmt.Errorf("embedded controller: %w", err)
	}
	return nil
}

// Close releases the client and the embedded controller's store; call it
// after Run returned. It is safe to call twice.
func (l *controllerLink) Close() error {
	err := l.Client.Close()
	if l.embedded != nil {
		err = errors.Join(err, l.embedded.Close())
	}
	return err
}

// newLeaser connects to the controller, or opens the embedded one with
// opts.EmbeddedController; its heartbeats report the VNIs inUse returns.
// The returned link's Run must run (heartbeats, pool refills, the embedded
// controller) and its Close be called after Run returned.
func newLeaser(ctx context.Context, opts Options, inUse func(context.Context) ([]uint16, error), logger *slog.Logger, reg prometheus.Registerer) (*controllerLink, error) {
	copts := controllerclient.Options{
		Node:       opts.NodeName,
		Heartbeat:  opts.ControllerHeartbeat,
		InUseVNIs:  inUse,
		Logger:     logger.With("component", "controllerclient"),
		Registerer: reg,
	}
	if opts.Controller == "embedded" {
		return newEmbeddedLink(ctx, opts, copts, logger, reg)
	}
	tlsConf, err := controllerTLS(opts)
	if err != nil {
		return nil, err
	}
	copts.TLS = tlsConf
	copts.TokenFile = opts.ControllerTokenFile
	copts.InsecureToken = opts.ControllerInsecureToken
	c, err := controllerclient.Dial(opts.Controller, copts)
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", opts.Controller, err)
	}
	return &controllerLink{Client: c}, nil
}

// newEmbeddedLink opens the embedded controller in the state directory
// and a client that calls it in-process.
func newEmbeddedLink(ctx context.Context, opts Options, copts controllerclient.Options, logger *slog.Logger, reg prometheus.Registerer) (*controllerLink, error) {
	if opts.EmbeddedController == nil {
		return nil, ErrNoEmbeddedController
	}
	ec, err := opts.EmbeddedController(ctx, filepath.Join(opts.StateDir, "controller"), logger.With("component", "controller"), reg)
	if err != nil {
		return nil, fmt.Errorf("embedded controller: %w", err)
	}
	c, err := controllerclient.New(ec.API(), copts)
	if err != nil {
		return nil, errors.Join(err, ec.Close())
	}
	return &controllerLink{Client: c, embedded: ec}, nil
}

// controllerTLS builds the client TLS configuration: the CA that signed
// the controller's certificate and, for mTLS, the agent's own.
func controllerTLS(opts Options) (*tls.Config, error) {
	if opts.ControllerCA == "" && opts.ControllerCert == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.ControllerCA != "" {
		pem, err := os.ReadFile(opts.ControllerCA)
		if err != nil {
			return nil, fmt.Errorf("controller CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("controller CA %s: no PEM certificate", opts.ControllerCA)
		}
		conf.RootCAs = pool
	}
	if opts.ControllerCert != "" {
		cert, err := tls.LoadX509KeyPair(opts.ControllerCert, opts.ControllerKey)
		if err != nil {
			return nil, fmt.Errorf("agent certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// localVNIs are the pod-scoped VNIs from the node's own pool that the
// recorded holders use and have not released; the client must not hand
// them out again.
func localVNIs(s *checkpoint.State) []uint16 {
	var out []uint16
	for _, id := range s.IDs() {
		if h := s.Holders[id]; h.Local && h.VNI != 0 && !h.Released {
			out = append(out, h.VNI)
		}
	}
	return out
}

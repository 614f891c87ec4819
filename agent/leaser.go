package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// timedLeaser measures the controller calls of the pod path.
type timedLeaser struct {
	vniLeaser
	m *metrics
}

func (t timedLeaser) AcquireJobVNI(ctx context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	start := t.m.now()
	l, err := t.vniLeaser.AcquireJobVNI(ctx, pod)
	t.m.controllerCalls.WithLabelValues("acquire", result(err)).Observe(t.m.now().Sub(start).Seconds())
	return l, err
}

func (t timedLeaser) ReleaseJobVNI(ctx context.Context, l controllerclient.Lease) error {
	start := t.m.now()
	err := t.vniLeaser.ReleaseJobVNI(ctx, l)
	t.m.controllerCalls.WithLabelValues("release", result(err)).Observe(t.m.now().Sub(start).Seconds())
	return err
}

// newLeaser connects to the controller, or starts the embedded one; its
// heartbeats report the VNIs inUse returns. The
// returned client's Run must run (heartbeats, pool refills) and its Close
// be called after Run returned.
func newLeaser(ctx context.Context, opts Options, inUse func(context.Context) ([]uint16, error), logger *slog.Logger, reg prometheus.Registerer) (*controllerclient.Client, error) {
	copts := controllerclient.Options{
		Node:       opts.NodeName,
		Heartbeat:  opts.ControllerHeartbeat,
		InUseVNIs:  inUse,
		Logger:     logger.With("component", "controllerclient"),
		Registerer: reg,
	}
	if opts.Controller == "embedded" {
		c, err := controllerclient.Embedded(ctx, filepath.Join(opts.StateDir, "controller"), controller.Config{}, copts)
		if err != nil {
			return nil, fmt.Errorf("embedded controller: %w", err)
		}
		return c, nil
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
	return c, nil
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
// recorded pods use; the client must not hand them out again.
func localVNIs(s *checkpoint.State) []uint16 {
	var out []uint16
	for _, p := range s.Pods {
		if p.Local && p.VNI != 0 {
			out = append(out, p.VNI)
		}
	}
	return out
}

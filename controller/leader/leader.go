package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config configures an election. Zero durations take the defaults below.
type Config struct {
	// Namespace and Name of the Lease object.
	Namespace, Name string
	// Identity of this replica, unique among the candidates (the pod name).
	Identity string
	// LeaseDuration is how long followers wait after the last renewal
	// before taking over; default 2 s. With RetryPeriod it bounds failover
	// after a crash (the new leader then loads the state). It is short
	// because it is not what keeps two leaders from writing: the store is
	// fenced (package store/kube), so a deposed leader that still believes
	// it leads fails its next commit; a short lease costs at worst an
	// extra failover when the API server stalls past RenewDeadline.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a renewal before
	// it steps down; default 1.5 s. Must be below LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the interval of acquire and renew attempts; default
	// 500 ms: the leader writes its Lease twice a second.
	RetryPeriod time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for slingshot_controller_leader and
	// slingshot_controller_leader_terms_total; nil registers none.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 2 * time.Second
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = 1500 * time.Millisecond
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate returns the configuration's errors joined, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Namespace == "" || c.Name == "" {
		errs = append(errs, errors.New("leader election needs the lease's namespace and name"))
	}
	if c.Identity == "" {
		errs = append(errs, errors.New("leader election needs an identity"))
	}
	if c.RetryPeriod <= 0 || c.RenewDeadline <= c.RetryPeriod || c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("leader election wants 0 < retry period (%v) < renew deadline (%v) < lease duration (%v)",
			c.RetryPeriod, c.RenewDeadline, c.LeaseDuration))
	}
	return errors.Join(errs...)
}

type metrics struct {
	leader prometheus.Gauge
	terms  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slingshot_controller_leader",
			Help: "1 while this replica is the elected leader, else 0."}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{Name: "slingshot_controller_leader_terms_total",
			Help: "Times this replica became the leader."}),
	}
	if reg != nil {
		reg.MustRegister(m.leader, m.terms)
	}
	return m
}

// Elector campaigns for one Lease.
type Elector struct {
	cfg    Config
	client coordinationv1.LeasesGetter
	m      *metrics
}

// New returns an Elector over client. It returns the configuration's
// validation errors.
func New(client coordinationv1.LeasesGetter, cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg.withDefaults(), client: client, m: newMetrics(cfg.Registerer)}, nil
}

// Run campaigns until ctx ends. Each time this replica is elected it calls
// lead with a context that ends when leadership is lost or ctx ends; lead
// must return then, and Run campaigns again. Run returns nil when ctx
// ends, or lead's error when lead fails while it still leads (the caller
// should exit: another replica takes over).
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	for ctx.Err() == nil {
		if err := e.term(ctx, lead); err != nil {
			return err
		}
	}
	return nil
}

// term runs one election: campaign, lead until leadership or ctx ends,
// then release the Lease.
func (e *Elector) term(ctx context.Context, lead func(ctx context.Context) error) error {
	log := e.cfg.Logger
	// The election outlives ctx while lead runs, so that the Lease is
	// released only once lead has returned.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	var mu sync.Mutex
	leading := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			cancelElect()
		}
	})
	defer stop()

	started := make(chan context.Context, 1)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
		Client:     e.client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { started <- lctx },
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != e.cfg.Identity {
					log.Info("leader elected", "leader", id, "lease", e.cfg.Namespace+"/"+e.cfg.Name)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		le.Run(electCtx)
	}()
	var lctx context.Context
	select {
	case lctx = <-started:
	case <-runDone:
		return nil
	}

	mu.Lock()
	leading = true
	mu.Unlock()
	lctx, cancelLead := context.WithCancel(lctx)
	stopLead := context.AfterFunc(ctx, cancelLead)
	e.m.leader.Set(1)
	e.m.terms.Inc()
	log.Info("leading", "identity", e.cfg.Identity, "lease", e.cfg.Namespace+"/"+e.cfg.Name)
	leadErr := lead(lctx)
	lost := lctx.Err() != nil && ctx.Err() == nil
	stopLead()
	cancelLead()
	e.m.leader.Set(0)
	cancelElect() // releases the Lease now that lead has returned
	<-runDone
	switch {
	case ctx.Err() != nil:
		log.Info("stopped leading: shutting down", "identity", e.cfg.Identity)
		return nil
	case leadErr != nil && !lost:
		return fmt.Errorf("leader: %w", leadErr)
	}
	log.Warn("lost leadership", "identity", e.cfg.Identity, "err", leadErr)
	return nil
}

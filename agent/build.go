package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/devplugin"
	"github.com/slingshot-k8s/slingshot/agent/dra"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/agent/netns/pin"
	"github.com/slingshot-k8s/slingshot/agent/nri"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/health"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/buildinfo"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// parts is the agent, built: every component made and checked, nothing
// running yet.
type parts struct {
	opts   Options
	cfg    config.Config
	logger *slog.Logger
	reg    *prometheus.Registry
	m      *metrics

	managedLo, managedHi uint16

	// nics are the opened NICs, whose drivers the engine alone binds
	// through; eng is the engine; pol is the policy it and the claims read.
	nics nicSet
	eng  *engine.Engine
	pol  atomic.Pointer[policy]
	// netns finds pods' namespaces (the device plugin's); cdi writes the
	// CDI specs (nil when CDI is off).
	netns netns.Finder
	cdi   *cdispec.Writer
	// pins holds the namespaces services admit past the agent's life
	// (--pin-netns); nil: only while the agent runs.
	pins   *pin.Pins
	served []sysfs.NIC
	inv    *inventory
	// fe serves the NICs to the kubelet: the device plugin or DRA.
	fe         frontEnd
	client     *controllerLink
	mon        *health.Monitor
	cfgWatcher *config.Watcher // nil without a config file
	httpSrv    *http.Server    // nil without a metrics address
	lis        net.Listener
	ready      atomic.Bool
	dsvc       *defaultServiceGuard
	ipam       *ipam.Allocator
	store      *checkpoint.Store // the record, which the engine alone changes once made
	ipamSrv    *http.Server      // nil without --ipam-socket
	ipamLis    net.Listener

	// kube is the Kubernetes API, nil with --no-kube; events writes the
	// agent's events through it (event.Nop without it), kevents is its
	// broadcaster (nil without it).
	kube    kubernetes.Interface
	kcfg    *rest.Config // nil with --no-kube
	events  eventRecorder
	kevents *kubeEvents
	// drainAfter is cleanup.drainAfter, reloadable; drain taints the node
	// while services stay busy past it.
	drainAfter atomic.Int64
	drain      *drainWatch

	closers []io.Closer
}

// close releases what building opened, in reverse order.
func (a *parts) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i].Close()
	}
}

// build makes every part of the agent from its options. On error, the
// parts made so far are returned for closing.
func build(ctx context.Context, opts Options, logger *slog.Logger) (*parts, error) {
	a := &parts{opts: opts, logger: logger}
	front := a.buildPlugin
	if opts.API == APIDRA {
		front = a.buildDRA
	}
	steps := []func(context.Context) error{a.buildBase, a.buildKube, a.buildNICs, a.buildState, a.buildIPAM, a.buildEngine, front, a.buildServing}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return a, err
		}
	}
	return a, nil
}

// buildBase reads the configuration and makes the metrics registry.
func (a *parts) buildBase(context.Context) error {
	cfg, err := config.Load(a.opts.Config)
	if err != nil {
		return err
	}
	a.cfg = cfg
	if a.managedLo, a.managedHi, err = ParseVNIRange(a.opts.ManagedVNIs); err != nil {
		return err
	}
	if err := cfg.CheckNamedVNIs(a.managedLo, a.managedHi); err != nil {
		return fmt.Errorf("config: %w (see --managed-vnis)", err)
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.NewCollector(version.Get()))
	a.m = newMetrics(time.Now)
	if err := a.m.register(a.reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// buildKube makes the Kubernetes client and the events written through
// it, limited (event.Limited); with --no-kube, none.
func (a *parts) buildKube(context.Context) error {
	a.drainAfter.Store(int64(a.cfg.Cleanup.DrainAfter.Duration))
	if a.opts.NoKube {
		a.logger.Warn("--no-kube: no Kubernetes API; events are off, and a node that cannot clean up is not tainted")
		a.events = event.Nop{}
		return nil
	}
	kcfg, err := kubeConfig(a.opts.Kubeconfig)
	if err != nil {
		return err
	}
	a.kcfg = kcfg
	if a.kube, err = kubernetes.NewForConfig(kcfg); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	a.kevents = newKubeEvents(a.kube)
	a.events = event.NewLimited(a.kevents, event.DefaultLimits, time.Now, func(r event.Reason) {
		a.m.eventsDropped.WithLabelValues(string(r)).Inc()
	})
	return nil
}

// buildNICs discovers the NICs, opens their drivers, and makes what finds
// and pins the pods' namespaces and the CDI writer.
func (a *parts) buildNICs(ctx context.Context) error {
	opts, cfg, logger := a.opts, a.cfg, a.logger
	disc, err := sysfs.Discover(os.DirFS(opts.SysfsRoot))
	if err != nil {
		return fmt.Errorf("discover NICs under %s: %w", opts.SysfsRoot, err)
	}
	for _, p := range disc.Problems {
		logger.Warn("discovery problem", "err", p)
	}
	finder, criConn, err := newNetnsFinder(ctx, opts, logger)
	if err != nil {
		return err
	}
	if criConn != nil {
		a.closers = append(a.closers, criConn)
	}
	a.netns = finder
	a.pol.Store(new(policyFrom(cfg)))
	if opts.PinNetns {
		pins, err := pin.New(filepath.Join(opts.StateDir, "netns"))
		if err != nil {
			return fmt.Errorf("--pin-netns: %w", err)
		}
		if prop := pins.Propagation(); prop.Master != 0 {
			logger.Warn("the state directory is a slave mount (HostToContainer): namespace pins end with the agent's container; mount it Bidirectional", "dir", pins.Dir())
		}
		a.pins = pins
	}
	a.nics = nicSet{}
	for _, n := range disc.NICs {
		if a.openNIC(n) {
			a.served = append(a.served, n)
		}
	}
	if len(a.served) == 0 {
		logger.Warn("no usable Slingshot NIC found; the NIC resource will advertise nothing", "sysfs", opts.SysfsRoot)
	}
	a.inv = newInventory(a.served)
	for _, n := range a.served {
		a.m.nicSpeed.WithLabelValues(n.Name).Set(float64(n.Properties.SpeedMbps))
	}
	if cfg.CDIEnabled() {
		var opts []cdispec.Option
		if a.opts.API != APIDRA && !a.opts.DevicePluginNRI {
			// PreStartContainer's spec is resolved by the runtime a
			// moment later: wait until it can be (cdispec's package
			// comment). DRA's specs are written at Prepare, long before,
			// and the wait's cache would rescan at each of them for
			// nothing. With --deviceplugin-nri the environment is set at
			// CreateContainer, and no spec is written for a container.
			opts = append(opts, cdispec.WaitVisible(cdiVisibleTimeout, a.m.observeCDIVisible))
		}
		w, err := cdispec.New(cfg.CDI.SpecDir, cfg.NICResource.Name, opts...)
		if err != nil {
			return err
		}
		a.closers = append(a.closers, w)
		a.cdi = w
	}
	return nil
}

// cdiVisibleTimeout bounds PreStartContainer's wait for its CDI spec to
// be resolvable: past it the container may fail closed, and the kubelet
// retries it.
const cdiVisibleTimeout = time.Second

// pinner is the pins as the engine takes them: a nil interface without.
func (a *parts) pinner() engine.Pinner {
	if a.pins == nil {
		return nil
	}
	return engine.Pins{Pins: a.pins}
}

// openNIC opens a discovered NIC's driver and adds it to the NICs. It
// reports whether the NIC is served: virtual functions and NICs whose
// device cannot be opened are not.
func (a *parts) openNIC(n sysfs.NIC) bool {
	if n.VF {
		a.logger.Info("skipping virtual function: services are made on the physical function", "nic", n.Name)
		return false
	}
	dev, closer, err := openDevice(a.opts.CXIDriver, a.opts.DevRoot, a.opts.StateDir, n)
	if err != nil {
		a.logger.Error("NIC unusable", "nic", n.Name, "err", err)
		return false
	}
	a.closers = append(a.closers, closer)
	// Each failure counter of the NIC starts at 0, so that the first
	// failure is an increase that an alert's rate() sees.
	for _, op := range []string{"create", "create_conflict", "bind", "destroy"} {
		a.m.serviceErrors.WithLabelValues(n.Name, op)
	}
	retry := backoff.Policy{
		Initial: a.cfg.Cleanup.BusyInterval.Duration, Max: 5 * time.Second, Factor: 2, Jitter: 0.2,
		Attempts: a.cfg.Cleanup.BusyRetries,
	}
	client := cxi.NewClient(countingDevice{Device: dev, busy: a.m.busyRetries.WithLabelValues(n.Name)},
		cxi.WithDestroyRetry(retry), cxi.WithLogger(a.logger.With("nic", n.Name)),
		cxi.WithDeviceMaxima(n.Properties.Max))
	a.nics[n.Name] = &nic{name: n.Name, index: n.Index, drv: client}
	return true
}

// buildPlugin makes the device-plugin front end over the engine: the
// served resources, their servers and the pod watch.
func (a *parts) buildPlugin(context.Context) error {
	var read devplugin.AnnotationReader
	if a.kcfg != nil {
		var err error
		if read, err = apiAnnotations(a.kcfg); err != nil {
			return err
		}
	}
	var state *nri.State
	if a.opts.DevicePluginNRI {
		gauge := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slingshot_agent_nri_connected",
			Help: "1 while the agent is connected to the container runtime's NRI socket (DRA mode, or --deviceplugin-nri); while 0 no container can be checked, the agent is not ready and binds are refused.",
		})
		if err := a.reg.Register(gauge); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		state = nri.NewState(a.opts.NRISocket, func(up bool) { gauge.Set(map[bool]float64{false: 0, true: 1}[up]) }).WithEvents(a.events, a.opts.NodeName)
	}
	f, closeConn, err := devplugin.New(devplugin.Config{
		Node: a.opts.NodeName, Settings: a.cfg, Engine: a.eng, NICs: a.served,
		DevRoot: a.opts.DevRoot, SysfsRoot: a.opts.SysfsRoot, ProcRoot: a.opts.ProcRoot, KubeletDir: a.opts.KubeletDir,
		FilesDir: filepath.Join(a.opts.StateDir, "containers"), CDI: a.cdi,
		Netns: handles{a.netns}, Annotations: read, NRI: state, OpenNetns: a.openHostNetns,
		Jobs:      func() *jobpolicy.Policy { return a.pol.Load().jobs },
		Healthy:   a.inv.healthy,
		Reconcile: devplugin.ReconcileOptions{CleanManaged: a.opts.CleanManaged, ManagedLo: a.managedLo, ManagedHi: a.managedHi},
		Metrics:   a.m.plugin(), Events: a.events, Registerer: a.reg, Logger: a.logger,
	})
	if err != nil {
		return err
	}
	a.closers = append(a.closers, closerFunc(closeConn))
	a.fe = f
	return nil
}

// openHostNetns opens a sandbox's network namespace by the host path NRI
// names it by (/var/run/netns/cni-...), which the agent's container
// reaches through the host's root, <proc-root>/1/root, resolving links
// there.
func (a *parts) openHostNetns(path string) (engine.Handle, error) {
	p, err := netns.ResolveInRoot(filepath.Join(a.opts.ProcRoot, "1", "root"), path)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s on the host: %w", path, err)
	}
	return dra.OpenNetns(p)
}

// closerFunc is a func as an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// buildState opens the agent's checkpoint and its controller client.
func (a *parts) buildState(ctx context.Context) error {
	store, err := checkpoint.Open(filepath.Join(a.opts.StateDir, CheckpointName), a.opts.NodeName, a.opts.CheckpointFormat)
	if errors.Is(err, checkpoint.ErrVersion) {
		// Not damage: a newer agent wrote it. Moving it aside would orphan
		// every service it names.
		return fmt.Errorf("agent checkpoint written by a newer agent (do not move it aside: it names the running pods' services; roll the agent forward again, or start the newer agent once with --checkpoint-format=%d, the chart's agent.checkpointFormat, and then roll back): %w", checkpoint.DefaultFormat, err)
	}
	if err != nil {
		return fmt.Errorf("agent checkpoint (move it aside to start afresh, after checking the services with inspect): %w", err)
	}
	// Claims of an agent that kept them in their own file join the one
	// record first, so that both front ends see every service made.
	moved, err := dra.MigrateLegacy(a.opts.StateDir, a.opts.NodeName, store)
	if err != nil {
		return fmt.Errorf("DRA claims of an earlier agent (move the file aside to start afresh, after checking the services with inspect): %w", err)
	}
	if moved > 0 {
		a.logger.Info("moved the DRA claims of an earlier agent into the checkpoint", "claims", moved)
	}
	if n := len(store.Holders(checkpoint.KindClaim)); n > 0 && a.opts.API != APIDRA {
		return fmt.Errorf("--api=%s: the checkpoint records %d DRA claims; switch a node's API once its pods are drained (slingshot-agent inspect lists them)", a.opts.API, n)
	}
	// The heartbeats, which ask for the VNIs in use, begin once the
	// engine is made.
	client, err := newLeaser(ctx, a.opts, func(ctx context.Context) ([]uint16, error) { return a.eng.InUseVNIs(ctx) }, a.logger, a.reg)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, client)
	client.RestorePodVNIs(localVNIs(store.Snapshot()))
	a.client = client
	store.OnWriteError(func(error) { a.m.checkpointErrors.Inc() })
	a.store = store
	return nil
}

// buildEngine makes the engine over the record, the NICs, the controller
// client and the address allocator, which its holders' hsn interfaces
// take their addresses from.
func (a *parts) buildEngine(context.Context) error {
	var addrs engine.AddressAllocator
	if a.ipam != nil {
		addrs = a.ipam
	}
	var err error
	a.eng, err = engine.New(engine.Config{
		Node: a.opts.NodeName, Store: a.store, NICs: a.nics, Leaser: timedLeaser{Leaser: a.client, m: a.m},
		Metrics: a.m.engine(), Pins: a.pinner(), Addrs: addrs,
		Defaults: func() engine.Defaults { return a.pol.Load().defaults },
		Events:   a.events, Log: a.logger.With("component", "engine"), Now: time.Now,
	})
	return err
}

// buildServing makes the health monitor, the admin HTTP endpoint and the
// configuration watcher.
func (a *parts) buildServing(context.Context) error {
	a.mon = health.New(health.Config{
		Targets:      a.inv.healthTargets(a.opts.SysfsRoot),
		Logger:       a.logger.With("component", "health"),
		PollInterval: a.cfg.Health.PollInterval.Duration,
		Registerer:   a.reg,
	})
	a.dsvc = newDefaultServiceGuard(a.nics, a.m, a.logger, a.cfg.AllowOpenDefaultService)
	a.dsvc.events, a.dsvc.node = a.events, a.opts.NodeName
	a.drain = &drainWatch{
		node: a.opts.NodeName, after: &a.drainAfter, pending: func() []pendingDestroy { return pendingOf(a.eng) },
		events: a.events, logger: a.logger.With("component", "drain"), now: time.Now,
		stuckG: func(n int) { a.m.cleanupStuck.Set(float64(n)) },
	}
	if a.kube != nil {
		a.drain.taint = nodeTaints{client: a.kube, node: a.opts.NodeName}
	}
	var err error
	if a.httpSrv, a.lis, err = serveHTTP(a.opts.MetricsAddr, a.opts.InspectAddr, a.reg, &a.ready, a.serving, a.report, a.notReady); err != nil {
		return err
	}
	if a.lis != nil {
		a.closers = append(a.closers, a.lis)
	}
	if a.opts.Config == "" {
		return nil
	}
	a.cfgWatcher, err = config.NewWatcher(a.opts.Config, a.logger.With("component", "config"), a.reg, a.reload)
	return err
}

// report is the inspect endpoint's view of the agent.
func (a *parts) report(ctx context.Context) *inspect.Report {
	r := a.commonReport(ctx, a.ready.Load())
	a.fe.Report(ctx, r)
	if a.ipam != nil {
		snap := a.ipam.Inspect()
		r.IPAM = &snap
	}
	return r
}

// reload applies a changed configuration: the pod path's policy and the
// node pool's mode at once, the rest at the next start.
func (a *parts) reload(c config.Config) {
	if err := c.CheckNamedVNIs(a.managedLo, a.managedHi); err != nil {
		a.logger.Error("changed configuration not applied", "err", err)
		return
	}
	a.pol.Store(new(policyFrom(c)))
	a.dsvc.setAllow(c.AllowOpenDefaultService)
	a.drainAfter.Store(int64(c.Cleanup.DrainAfter.Duration))
	a.fe.Reload(c)
	old := a.cfg
	// The hsn interface is part of the policy, applied at once to the
	// pods bound from now on.
	if c.NICResource.Name != old.NICResource.Name || c.NICResource.SharesPerNIC != old.NICResource.SharesPerNIC || c.CDIEnabled() != old.CDIEnabled() || c.CDI.SpecDir != old.CDI.SpecDir {
		a.logger.Warn("resource name, shares and CDI settings take effect at the next agent start")
	}
}

// run runs the built agent until ctx ends: the controller client first,
// then the front end's start (the start-up reconcile, the kubelet
// served), then every loop, the common ones and the front end's, each
// owned by one errgroup. A unit's fatal error stops them all.
func (a *parts) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(ctx)
	if a.kevents != nil {
		// Before anything that records: events made before the sink is
		// started go nowhere.
		if err := a.kevents.start(gctx); err != nil {
			return err
		}
		defer a.kevents.stop()
	}
	g.Go(func() error { return a.client.Run(gctx) })
	if err := a.fe.Start(gctx, func(err error) { cancel(err) }); err != nil {
		cancel(err)
		return errors.Join(err, g.Wait())
	}
	defer a.fe.Stop()
	// The state gauges read the reconciled record, whichever front end.
	a.reg.MustRegister(newStateCollector(a.eng, a.nics))
	if a.lis != nil {
		a.logger.Info("serving metrics, health and inspect", "addr", a.lis.Addr().String())
		g.Go(a.serveHTTP)
		g.Go(func() error { return a.shutdownHTTP(gctx) })
	}
	g.Go(func() error { return a.runIPAM(gctx) })
	g.Go(func() error { return a.mon.Run(gctx) })
	g.Go(func() error { a.followHealth(); return nil })
	a.dsvc.check(gctx) // at start, then every health poll: an admin may enable it later
	g.Go(func() error { return a.dsvc.run(gctx, a.cfg.Health.PollInterval.Duration) })
	g.Go(func() error { return a.drain.run(gctx) })
	if a.cfgWatcher != nil {
		g.Go(func() error { return a.cfgWatcher.Run(gctx) })
	}
	for _, unit := range a.fe.Loops(gctx) {
		g.Go(unit)
	}
	a.ready.Store(true)
	a.m.ready.Set(1)
	a.logger.Info("agent ready", append([]any{"node", a.opts.NodeName, "version", version.Version, "nics", len(a.served), "driver", a.opts.CXIDriver}, a.fe.Describe()...)...)

	err := g.Wait()
	a.eng.Namespaces().CloseAll()
	a.m.ready.Set(0)
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if ctx.Err() != nil && err == nil {
		a.logger.Info("agent stopped")
	}
	return err
}

// serveHTTP serves the admin endpoint until shutdownHTTP stops it.
func (a *parts) serveHTTP() error {
	if err := a.httpSrv.Serve(a.lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// shutdownHTTP stops the admin endpoint when ctx ends.
func (a *parts) shutdownHTTP(ctx context.Context) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return a.httpSrv.Shutdown(sctx)
}

// notReady says why the agent must not report ready beyond its start, or
// "": a NIC's default service open, or what the front end says (in DRA
// mode, no NRI connection).
func (a *parts) notReady() string {
	if why := a.dsvc.notReady(); why != "" {
		return why
	}
	return a.fe.NotReady()
}

// serving reports whether the kubelet is served: the device plugin is
// registered, or the DRA driver.
func (a *parts) serving() bool { return a.fe.Serving() }

// followHealth advertises the NICs' health changes until the monitor's
// events end (when it stops).
func (a *parts) followHealth() {
	for ev := range a.mon.Events() {
		if a.inv.setHealth(ev.NIC, ev.Healthy, ev.Reason) {
			a.logger.Info("NIC health changed", "nic", ev.NIC, "healthy", ev.Healthy, "reason", ev.Reason)
			a.events.Record(event.Node(a.opts.NodeName), healthReason(ev.Healthy), healthMessage(ev.NIC, ev.Healthy, ev.Reason))
			a.fe.HealthChanged()
		}
		a.m.nicSpeed.WithLabelValues(ev.NIC).Set(float64(ev.Status.SpeedMbps))
	}
}

// healthReason is the event of a NIC's health change.
func healthReason(healthy bool) event.Reason {
	if healthy {
		return event.NICHealthy
	}
	return event.NICUnhealthy
}

// healthMessage says which NIC changed, and why it is unhealthy.
func healthMessage(nic string, healthy bool, reason string) string {
	if healthy {
		return "NIC " + nic + " is healthy again"
	}
	if reason == "" {
		reason = "unhealthy"
	}
	return "NIC " + nic + " is unhealthy: " + reason
}

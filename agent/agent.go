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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/health"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/gpu"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// CheckpointName is the agent's checkpoint file in the state directory.
const CheckpointName = "checkpoint.json"

// Run runs the agent until ctx ends. It returns an error when it cannot
// start (bad configuration, unreadable checkpoint, driver unreachable) or
// when a part it cannot do without fails.
func Run(ctx context.Context, opts Options, logger *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg, err := config.Load(opts.Config)
	if err != nil {
		return err
	}
	managedLo, managedHi, err := ParseVNIRange(opts.ManagedVNIs)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(time.Now)
	if err := m.register(reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	disc, err := sysfs.Discover(os.DirFS(opts.SysfsRoot))
	if err != nil {
		return fmt.Errorf("discover NICs under %s: %w", opts.SysfsRoot, err)
	}
	for _, p := range disc.Problems {
		logger.Warn("discovery problem", "err", p)
	}
	allocDir := filepath.Join(opts.StateDir, "containers")
	if err := os.MkdirAll(allocDir, 0o755); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}

	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	finder, criConn, err := newNetnsFinder(ctx, opts, logger)
	if err != nil {
		return err
	}
	if criConn != nil {
		closers = append(closers, criConn)
	}

	b := &binder{
		node:     opts.NodeName,
		resource: cfg.NICResource.Name,
		logger:   logger.With("component", "binder"),
		nics:     map[string]*nic{},
		devNIC:   map[string]string{},
		resolve:  map[string]func([]string) ([]*nic, error){},
		netns:    handles{finder},
		allocDir: allocDir,
		metrics:  m,
		now:      time.Now,
	}
	b.setPolicy(policyFrom(cfg))

	var served []sysfs.NIC
	for _, n := range disc.NICs {
		if n.VF {
			logger.Info("skipping virtual function: services are made on the physical function", "nic", n.Name)
			continue
		}
		dev, closer, err := openDevice(opts.CXIDriver, opts.DevRoot, opts.StateDir, n)
		if err != nil {
			logger.Error("NIC unusable", "nic", n.Name, "err", err)
			continue
		}
		closers = append(closers, closer)
		retry := backoff.Policy{
			Initial: cfg.Cleanup.BusyInterval.Duration, Max: 5 * time.Second, Factor: 2, Jitter: 0.2,
			Attempts: cfg.Cleanup.BusyRetries,
		}
		client := cxi.NewClient(countingDevice{Device: dev, busy: m.busyRetries.WithLabelValues(n.Name)},
			cxi.WithDestroyRetry(retry), cxi.WithLogger(logger.With("nic", n.Name)),
			cxi.WithDeviceMaxima(n.Properties.Max)) // the NIC's own limits, not the Cassini defaults
		b.nics[n.Name] = &nic{name: n.Name, index: n.Index, devPath: filepath.Join(opts.DevRoot, n.Name), drv: client}
		for s := range cfg.NICResource.SharesPerNIC {
			b.devNIC[nicDeviceID(n, s, cfg.NICResource.SharesPerNIC)] = n.Name
		}
		served = append(served, n)
	}
	if len(served) == 0 {
		logger.Warn("no usable Slingshot NIC found; the NIC resource will advertise nothing", "sysfs", opts.SysfsRoot)
	}

	if cfg.CDIEnabled() {
		w, err := cdispec.New(cfg.CDI.SpecDir, cfg.NICResource.Name)
		if err != nil {
			return err
		}
		b.cdi = w
	}

	inv := newInventory(served, cfg.NICResource.SharesPerNIC)
	for _, n := range served {
		m.nicSpeed.WithLabelValues(n.Name).Set(float64(n.Properties.SpeedMbps))
	}
	var units *unitResource
	if len(cfg.GPU.MachineTypes) > 0 {
		var notes []string
		units, notes, err = newUnitResource(b, cfg, opts.NodeName, os.DirFS(opts.SysfsRoot), os.DirFS(opts.ProcRoot),
			os.DirFS(opts.DevRoot), opts.DevRoot, served, inv)
		for _, note := range notes {
			logger.Info("GPU machine types", "note", note)
		}
		if err != nil {
			return err
		}
	}
	if units != nil {
		inv.unitNICs = map[string]bool{}
		for _, u := range units.carving.Units {
			for _, n := range u.NICs {
				inv.unitNICs[n.Name] = true
			}
		}
		for id, name := range b.devNIC {
			if inv.unitNICs[name] {
				delete(b.devNIC, id) // the NIC resource does not offer unit NICs
			}
		}
		b.resolve[units.name] = units.resolve
		logger.Info("GPU machine type", "resource", units.name, "units", len(units.carving.Units), "mode", units.mode,
			"excluded_gpus", len(units.carving.Excluded), "nic_resource_nics", len(served)-len(inv.unitNICs))
	}
	resources := []string{cfg.NICResource.Name}
	if units != nil {
		resources = append(resources, units.name)
	}
	pluginDir := filepath.Join(opts.KubeletDir, "device-plugins")
	res := &nicResource{name: cfg.NICResource.Name, b: b, shares: cfg.NICResource.SharesPerNIC, topo: inv.topology()}
	b.resolve[res.name] = b.nicsOf
	server, unitServer, err := newPluginServers(pluginDir, res, units, logger, reg)
	if err != nil {
		return err
	}
	servers := []*deviceplugin.Server{server}
	if unitServer != nil {
		servers = append(servers, unitServer)
	}
	lister, conn, err := podwatch.DialKubelet(filepath.Join(opts.KubeletDir, "pod-resources", "kubelet.sock"))
	if err != nil {
		return err
	}
	closers = append(closers, conn)
	for _, r := range resources {
		m.kubeletNudges.WithLabelValues(r) // exported at 0 from the start
	}
	watcher := podwatch.New(podwatch.Config{
		Lister:       lister,
		Resources:    resources,
		PluginDir:    pluginDir,
		PollInterval: cfg.PodResources.PollInterval.Duration,
		Nudge:        m.countNudges(nudgeKubelet(servers)),
		OnList:       m.observeList,
		Logger:       logger.With("component", "podwatch"),
	})
	b.pods = watcher

	store, err := checkpoint.Open(filepath.Join(opts.StateDir, CheckpointName), opts.NodeName)
	if err != nil {
		return fmt.Errorf("agent checkpoint (move it aside to start afresh, after checking the services with inspect): %w", err)
	}
	b.useStore(store)

	client, err := newLeaser(ctx, opts, b.inUseVNIs, logger, reg)
	if err != nil {
		return err
	}
	defer client.Close() // after every goroutine below has returned
	client.RestorePodVNIs(localVNIs(store.Snapshot()))
	b.leaser = timedLeaser{vniLeaser: client, m: m}

	g, gctx := errgroup.WithContext(ctx)
	// fail stops what was started before a start-up step failed.
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}
	g.Go(func() error { return client.Run(gctx) })
	rep, err := b.Reconcile(gctx, reconcileOptions{cleanManaged: opts.CleanManaged, managedLo: managedLo, managedHi: managedHi})
	if err != nil {
		return fail(fmt.Errorf("start-up reconcile: %w", err))
	}
	logger.Info("reconciled with the driver", "kept", rep.Kept, "adopted", rep.Adopted, "recreated", rep.Recreated,
		"destroyed", rep.Destroyed, "cleaned_pods", rep.CleanedPods, "foreign", rep.Foreign)
	reg.MustRegister(newStateCollector(b))
	if units != nil {
		reg.MustRegister(newUnitCollector(units, func() map[string]bool { return heldIDs(watcher.Latest(), units.name) }))
	}

	server.Update(inv.devices())
	if unitServer != nil {
		unitServer.Update(units.devices())
	}

	mon := health.New(health.Config{
		Targets:      inv.healthTargets(opts.SysfsRoot),
		Logger:       logger.With("component", "health"),
		PollInterval: cfg.Health.PollInterval.Duration,
		Registerer:   reg,
	})

	var ready atomic.Bool
	report := func(ctx context.Context) *inspect.Report {
		r := b.report(ctx, inv, ready.Load(), watcher)
		if units != nil {
			r.Units = units.report(heldIDs(watcher.Latest(), units.name))
		}
		return r
	}
	httpSrv, lis, err := serveHTTP(opts.MetricsAddr, reg, &ready, server, report)
	if err != nil {
		return fail(err)
	}
	if lis != nil {
		logger.Info("serving metrics, health and inspect", "addr", lis.Addr().String())
		g.Go(func() error {
			if err := httpSrv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
			defer cancel()
			return httpSrv.Shutdown(sctx)
		})
	}

	g.Go(func() error { return watcher.Run(gctx) })
	g.Go(func() error {
		retry := time.NewTicker(cfg.Cleanup.RetryStuckEvery.Duration)
		defer retry.Stop()
		b.RunCleanup(gctx, watcher.Changes(), retry.C)
		return nil
	})
	g.Go(func() error { return mon.Run(gctx) })
	g.Go(func() error {
		for ev := range mon.Events() {
			if inv.setHealth(ev.NIC, ev.Healthy, ev.Reason) {
				logger.Info("NIC health changed", "nic", ev.NIC, "healthy", ev.Healthy, "reason", ev.Reason)
				server.Update(inv.devices())
				if unitServer != nil {
					unitServer.Update(units.devices())
				}
			}
			m.nicSpeed.WithLabelValues(ev.NIC).Set(float64(ev.Status.SpeedMbps))
		}
		return nil
	})
	if opts.Config != "" {
		w, err := config.NewWatcher(opts.Config, logger.With("component", "config"), reg, func(c config.Config) {
			b.setPolicy(policyFrom(c))
			if units != nil {
				a, err := gpu.ForNode(c.GPU, opts.NodeName)
				switch {
				case err != nil || a.ResourceName != units.name:
					logger.Warn("a change of this node's machine type takes effect at the next agent start")
				case units.setMode(a.Mode):
					logger.Info("node pool mode changed", "mode", a.Mode, "resource", units.name)
					unitServer.Update(units.devices())
				}
			}
			if c.NICResource != cfg.NICResource || c.CDIEnabled() != cfg.CDIEnabled() || c.CDI.SpecDir != cfg.CDI.SpecDir {
				logger.Warn("resource name, shares and CDI settings take effect at the next agent start")
			}
		})
		if err != nil {
			return fail(err)
		}
		g.Go(func() error { return w.Run(gctx) })
	}
	g.Go(func() error { return deviceplugin.RunAll(gctx, servers...) })
	ready.Store(true)
	m.ready.Set(1)
	logger.Info("agent ready", "node", opts.NodeName, "nics", len(served), "resource", res.name, "driver", opts.CXIDriver)

	err = g.Wait()
	b.ns.closeAll()
	m.ready.Set(0)
	if ctx.Err() != nil && err == nil {
		logger.Info("agent stopped")
	}
	return err
}

// newPluginServers makes the device plugin servers: the NIC resource's,
// and the GPU machine type's where units is not nil.
func newPluginServers(pluginDir string, res *nicResource, units *unitResource, logger *slog.Logger, reg prometheus.Registerer) (server, unitServer *deviceplugin.Server, err error) {
	newServer := func(r deviceplugin.Resource) (*deviceplugin.Server, error) {
		return deviceplugin.NewServer(deviceplugin.ServerConfig{
			Resource:   r,
			PluginDir:  pluginDir,
			Logger:     logger.With("component", "deviceplugin"),
			Registerer: reg,
		})
	}
	if server, err = newServer(res); err != nil {
		return nil, nil, err
	}
	if units != nil {
		if unitServer, err = newServer(units); err != nil {
			return nil, nil, err
		}
	}
	return server, unitServer, nil
}

// nudgeKubelet makes the kubelet rewrite its device checkpoint for a
// resource: the resource's device plugin sends its unchanged device list
// again, and the kubelet writes the checkpoint on every list it receives.
func nudgeKubelet(servers []*deviceplugin.Server) func(resource string) {
	return func(resource string) {
		for _, s := range servers {
			if s.ResourceName() == resource {
				s.Resend()
			}
		}
	}
}

// policyFrom turns the configuration into the pod path's policy.
func policyFrom(c config.Config) policy {
	var tcs cxi.TrafficClasses
	for _, name := range c.TrafficClasses {
		t, err := cxi.ParseTrafficClasses(name)
		if err == nil {
			tcs |= t
		}
	}
	p := policy{tcs: tcs}
	if len(c.Limits) > 0 {
		l := cxi.DefaultLimits()
		field := map[string]*cxi.Limit{
			"ACs": &l.ACs, "CTs": &l.CTs, "EQs": &l.EQs, "LEs": &l.LEs,
			"PTEs": &l.PTEs, "TGQs": &l.TGQs, "TLEs": &l.TLEs, "TXQs": &l.TXQs,
		}
		for name, v := range c.Limits {
			if f := field[name]; f != nil { // config.Validate refuses other names
				*f = cxi.Limit{Max: v.Max, Res: v.Res}
			}
		}
		p.limits = &l
	}
	switch {
	case c.Membership.FallbackUID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberUID, ID: *c.Membership.FallbackUID}
	case c.Membership.FallbackGID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberGID, ID: *c.Membership.FallbackGID}
	}
	return p
}

// serveHTTP sets up the admin endpoint; an empty address serves nothing.
func serveHTTP(addr string, reg *prometheus.Registry, ready *atomic.Bool, dp *deviceplugin.Server, report func(context.Context) *inspect.Report) (*http.Server, net.Listener, error) {
	if addr == "" {
		return nil, nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := dp.Status()
		if !ready.Load() || !st.Serving {
			http.Error(w, "not ready: reconciling or not serving the kubelet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle(inspect.Path, inspect.Handler(report))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, lis, nil
}

// inventory is the NICs the agent serves and their health, as the device
// plugin advertises them. It is safe for concurrent use.
type inventory struct {
	shares int
	nics   []sysfs.NIC
	// unitNICs belong to GPU units: the NIC resource does not advertise
	// them, but their health still counts.
	unitNICs map[string]bool

	mu     sync.Mutex
	health map[string]nicHealth
}

type nicHealth struct {
	healthy bool
	reason  string
}

func newInventory(nics []sysfs.NIC, shares int) *inventory {
	inv := &inventory{shares: shares, nics: nics, health: map[string]nicHealth{}}
	for _, n := range nics {
		h := nicHealth{healthy: n.Healthy}
		switch {
		case len(n.Problems) > 0:
			h.reason = "discovery: " + errors.Join(n.Problems...).Error()
		case !n.Healthy:
			h.reason = "link down"
		}
		inv.health[n.Name] = h
	}
	return inv
}

// setHealth records a NIC's health and reports whether it changed.
func (inv *inventory) setHealth(name string, healthy bool, reason string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	old, ok := inv.health[name]
	if !ok {
		return false
	}
	inv.health[name] = nicHealth{healthy: healthy, reason: reason}
	return old.healthy != healthy
}

// healthy reports a NIC's health.
func (inv *inventory) healthy(name string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.health[name].healthy
}

// devices are the NIC resource's devices: every share of every NIC that
// no GPU unit holds.
func (inv *inventory) devices() []deviceplugin.Device {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var devs []deviceplugin.Device
	for _, n := range inv.nics {
		if inv.unitNICs[n.Name] {
			continue
		}
		for s := range inv.shares {
			devs = append(devs, deviceplugin.Device{
				ID:        nicDeviceID(n, s, inv.shares),
				Healthy:   inv.health[n.Name].healthy,
				NUMANodes: numaNodes(n.NUMANode),
			})
		}
	}
	return devs
}

func (inv *inventory) topology() map[string][]int64 {
	topo := map[string][]int64{}
	for _, d := range inv.devices() {
		topo[d.ID] = d.NUMANodes
	}
	return topo
}

func (inv *inventory) healthTargets(sysfsRoot string) []health.Target {
	var ts []health.Target
	for _, n := range inv.nics {
		t := health.Target{NIC: n.Name, DeviceDir: filepath.Join(sysfsRoot, n.Path, "device")}
		if n.NetDev != nil {
			t.NetDev = n.NetDev.Name
			t.NetDir = filepath.Join(sysfsRoot, "class", "net", n.NetDev.Name)
		}
		ts = append(ts, t)
	}
	return ts
}

func numaNodes(n int) []int64 {
	if n < 0 {
		return nil
	}
	return []int64{int64(n)}
}

// heldIDs are the device IDs of resource that pods hold.
func heldIDs(snap *podwatch.Snapshot, resource string) map[string]bool {
	held := map[string]bool{}
	for _, p := range snap.Pods {
		for _, byRes := range p.Containers {
			for _, id := range byRes[resource] {
				held[id] = true
			}
		}
	}
	return held
}

// report builds the inspect view.
func (b *binder) report(ctx context.Context, inv *inventory, ready bool, w *podwatch.Watcher) *inspect.Report {
	r := &inspect.Report{Node: b.node, Ready: ready, Generated: time.Now().UTC()}
	held := map[string]int{}
	for _, p := range w.Latest().Pods {
		for _, byRes := range p.Containers {
			for _, id := range byRes[b.resource] {
				held[b.devNIC[id]]++
			}
		}
	}
	inv.mu.Lock()
	for _, n := range inv.nics {
		h := inv.health[n.Name]
		in := inspect.NIC{Name: n.Name, PCIAddress: n.PCIAddress, NUMANode: n.NUMANode, Link: n.Properties.Link,
			SpeedMbps: n.Properties.SpeedMbps, Healthy: h.healthy, Reason: h.reason, Allocated: held[n.Name], Shares: inv.shares}
		if n.NetDev != nil {
			in.NetDev = n.NetDev.Name
		}
		r.NICs = append(r.NICs, in)
	}
	inv.mu.Unlock()

	podOf := map[string]map[uint32]string{}
	for _, p := range b.store.Pods() {
		key := p.Key()
		st := "running"
		if p.Exited != nil {
			st = "cleaning up"
		}
		ip := inspect.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, VNI: p.VNI, Scope: p.Scope, State: st}
		for _, s := range p.Services {
			ip.NICs = append(ip.NICs, s.NIC)
			if podOf[s.NIC] == nil {
				podOf[s.NIC] = map[uint32]string{}
			}
			podOf[s.NIC][s.ID] = key
		}
		r.Pods = append(r.Pods, ip)
	}

	names := make([]string, 0, len(b.nics))
	for name := range b.nics {
		names = append(names, name)
	}
	slices.SortFunc(names, func(x, y string) int { return b.nics[x].index - b.nics[y].index })
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, name := range names {
		svcs, err := b.nics[name].drv.List(ctx)
		if err != nil {
			continue
		}
		for _, s := range svcs {
			r.Services = append(r.Services, inspect.Service{NIC: name, ID: s.ID, Enabled: s.Enabled, System: s.System,
				VNIs: s.VNIs, Members: memberStrings(s), Pod: podOf[name][s.ID]})
		}
	}
	return r
}

func memberStrings(s cxi.Service) []string {
	if !s.RestrictedMembers {
		return []string{"all"}
	}
	out := make([]string, 0, len(s.Members))
	for _, m := range s.Members {
		out = append(out, m.String())
	}
	return out
}

// handles makes a netns.Finder a netnsFinder.
type handles struct{ netns.Finder }

func (h handles) Open(ctx context.Context, podUID string) (nsHandle, error) {
	ns, err := h.Finder.Open(ctx, podUID)
	if err != nil {
		return nil, err // not a nil *netns.Handle in a non-nil interface
	}
	return ns, nil
}

// newNetnsFinder chooses how pods' network namespaces are found: the
// container runtime over CRI first where its socket is found, /proc always
// (see package netns). In auto mode (no --cri-socket) it takes the first
// default socket whose runtime answers the CRI Version call: a node may
// have a containerd socket that serves no CRI (Docker's, beside CRI-O). It
// logs the choice once. The returned Closer, nil with /proc only, closes
// the CRI connection.
func newNetnsFinder(ctx context.Context, opts Options, logger *slog.Logger) (netns.Finder, io.Closer, error) {
	proc := netns.Proc{Root: opts.ProcRoot}
	if opts.CRISocket == CRINone {
		logger.Info("network namespaces from /proc only (--cri-socket none)", "proc", opts.ProcRoot)
		return proc, nil, nil
	}
	// With hostPID, PID 1's root is the host's: the runtime's socket and
	// the namespaces it pins (/var/run/netns/...) are reached there
	// without mounting them.
	hostRoot := filepath.Join(opts.ProcRoot, "1", "root")
	explicit := opts.CRISocket != ""
	candidates := netns.DefaultCRISockets
	if explicit {
		candidates = []string{opts.CRISocket}
	}
	for _, candidate := range candidates {
		socket, found := netns.FindCRISocket(hostRoot, candidate)
		if !found {
			if !explicit {
				continue
			}
			logger.Warn("CRI socket not found; asking it anyway, and /proc where that fails", "socket", candidate)
			socket = candidate
		}
		client, conn, err := netns.DialCRI(socket)
		if err != nil {
			return nil, nil, err
		}
		vctx, cancel := context.WithTimeout(ctx, netns.DefaultCRITimeout)
		v, err := client.Version(vctx, &runtimeapi.VersionRequest{})
		cancel()
		if err != nil {
			if !explicit {
				logger.Warn("a default CRI socket does not answer Version; trying the next", "socket", socket, "err", err)
				_ = conn.Close()
				continue
			}
			logger.Warn("the CRI socket does not answer Version; network namespaces from /proc where the runtime fails", "socket", socket, "err", err)
		}
		logger.Info("network namespaces from the container runtime (CRI), then /proc", "socket", socket,
			"runtime", v.GetRuntimeName(), "runtime_version", v.GetRuntimeVersion(), "host_root", hostRoot, "proc", opts.ProcRoot)
		return netns.Fallback{
			First:  netns.CRI{Client: client, ProcRoot: opts.ProcRoot, HostRoot: hostRoot},
			Second: proc,
			Logger: logger.With("component", "netns"),
		}, conn, nil
	}
	logger.Info("no CRI socket found that answers; network namespaces from /proc only", "tried", candidates, "host_root", hostRoot, "proc", opts.ProcRoot)
	return proc, nil, nil
}

package devplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/nri"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/gpu"
)

// Config is what the front end is made over: the agent's engine and NICs,
// the node's namespaces and addresses, and the settings at start.
type Config struct {
	Node string
	// Settings is the agent's configuration at start; Reload applies a
	// changed one.
	Settings config.Config
	Engine   *engine.Engine
	// NICs are the NICs the agent opened, whose drivers the engine has.
	NICs []sysfs.NIC
	// DevRoot holds the NICs' device nodes; SysfsRoot and ProcRoot are read
	// to carve the GPU machine type's units.
	DevRoot, SysfsRoot, ProcRoot string
	// KubeletDir holds device-plugins/ and pod-resources/kubelet.sock.
	KubeletDir string
	// FilesDir holds the per-allocation directories mounted into the
	// containers; CDI writes their specs (nil when CDI is off).
	FilesDir string
	CDI      *cdispec.Writer
	Netns    NetnsFinder
	// Annotations reads a pod's annotations from the API server where the
	// runtime did not report them; nil without an API server.
	Annotations AnnotationReader
	// Jobs is what a pod may ask for its services, as configured now.
	Jobs func() *jobpolicy.Policy
	// Healthy tells a NIC's health as the agent's monitor sees it now.
	Healthy func(nic string) bool
	// NRI, where not nil, is the runtime's NRI connection through which
	// every container is checked at CreateContainer, its environment set
	// there (no CDI device then); OpenNetns opens a sandbox's namespace by
	// the path the runtime names it by.
	NRI       *nri.State
	OpenNetns func(path string) (engine.Handle, error)
	// Reconcile says what the start-up reconcile may destroy.
	Reconcile  ReconcileOptions
	Metrics    Metrics
	Events     event.Recorder
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Metrics are the agent's series this front end counts into; the agent
// registers them in both modes, so that its dashboards have them.
type Metrics struct {
	// PreStart is PreStartContainer's latency, by result (ok, error).
	PreStart *prometheus.HistogramVec
	// Nudges counts the device lists resent to the kubelet, by resource.
	Nudges *prometheus.CounterVec
	// PodLists counts the PodResources List calls by result; ListLatency
	// times the successful ones.
	PodLists    *prometheus.CounterVec
	ListLatency prometheus.Histogram
}

// observeList counts a PodResources List call, for
// [podwatch.Config.OnList].
func (m Metrics) observeList(r podwatch.ListResult, took time.Duration) {
	if m.PodLists != nil {
		m.PodLists.WithLabelValues(string(r)).Inc()
	}
	if r == podwatch.ListOK && m.ListLatency != nil {
		m.ListLatency.Observe(took.Seconds())
	}
}

// Front is the device-plugin front end: the NIC resource, the GPU machine
// type's where one is configured, their servers, and the pod watch that
// tells when a pod is gone. It translates the kubelet's calls into the
// engine's; it makes no CXI service itself.
type Front struct {
	b          *binder
	res        *nicResource
	units      *unitResource        // nil without a GPU machine type
	unitServer *deviceplugin.Server // nil without a GPU machine type
	server     *deviceplugin.Server
	watcher    *podwatch.Watcher
	nri        *nri.State // nil without --deviceplugin-nri

	nics   []sysfs.NIC // served, in discovery order
	shares int
	// unitNICs belong to GPU units: the NIC resource does not offer them.
	unitNICs   map[string]bool
	healthy    func(nic string) bool
	retryStuck time.Duration
	reconcile  ReconcileOptions
	reg        prometheus.Registerer
	node       string
	logger     *slog.Logger
}

// New makes the front end: its resources and their servers, and the pod
// watch over the kubelet's PodResources. Nothing runs until Start. The
// returned closer ends the PodResources connection.
func New(c Config) (*Front, func() error, error) {
	if c.Engine == nil || c.Netns == nil || c.Healthy == nil || c.Registerer == nil {
		return nil, nil, errors.New("device-plugin front end: Engine, Netns, Healthy and Registerer are required")
	}
	if c.NRI != nil && c.OpenNetns == nil {
		return nil, nil, errors.New("device-plugin front end: NRI needs OpenNetns")
	}
	if err := os.MkdirAll(c.FilesDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("state directory: %w", err)
	}
	s := c.Settings
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &binder{
		node: c.Node, resource: s.NICResource.Name, logger: logger.With("component", "binder"),
		nics: map[string]*nic{}, devNIC: map[string]string{}, resolve: map[string]func([]string) ([]*nic, error){},
		eng: c.Engine, netns: c.Netns, jobs: c.Jobs, annotations: c.Annotations,
		files: &allocFiles{dir: c.FilesDir, cdi: c.CDI}, metrics: c.Metrics, events: c.Events, now: time.Now,
		openNetns: c.OpenNetns,
	}
	if c.NRI != nil {
		// The environment is set at CreateContainer: no CDI device, whose
		// spec the runtime's cache might not have read yet.
		b.files.cdi = nil
		b.ready = c.NRI.Ready
	}
	if b.events == nil {
		b.events = event.Nop{}
	}
	b.setPolicy(policyFrom(s))
	f := &Front{b: b, nri: c.NRI, nics: c.NICs, shares: s.NICResource.SharesPerNIC, healthy: c.Healthy,
		retryStuck: s.Cleanup.RetryStuckEvery.Duration, reconcile: c.Reconcile, reg: c.Registerer, node: c.Node, logger: logger}
	for _, n := range c.NICs {
		nd := &nic{name: n.Name, index: n.Index, devPath: filepath.Join(c.DevRoot, n.Name)}
		if n.NetDev != nil {
			nd.netdev = n.NetDev.Name
		}
		b.nics[n.Name] = nd
		for sh := range f.shares {
			b.devNIC[nicDeviceID(n, sh, f.shares)] = n.Name
		}
	}
	if err := f.makeUnits(c); err != nil {
		return nil, nil, err
	}
	resources := []string{s.NICResource.Name}
	if f.units != nil {
		resources = append(resources, f.units.name)
	}
	pluginDir := filepath.Join(c.KubeletDir, "device-plugins")
	f.res = &nicResource{name: s.NICResource.Name, b: b, shares: f.shares, topo: f.topology()}
	b.resolve[f.res.name] = b.nicsOf
	var err error
	if f.server, f.unitServer, err = newPluginServers(pluginDir, f.res, f.units, logger, c.Registerer); err != nil {
		return nil, nil, err
	}
	lister, conn, err := podwatch.DialKubelet(filepath.Join(c.KubeletDir, "pod-resources", "kubelet.sock"))
	if err != nil {
		return nil, nil, err
	}
	nudges := c.Metrics.Nudges
	for _, r := range resources {
		if nudges != nil {
			nudges.WithLabelValues(r) // exported at 0 from the start
		}
	}
	f.watcher = podwatch.New(podwatch.Config{
		Lister:       lister,
		Resources:    resources,
		PluginDir:    pluginDir,
		PollInterval: s.PodResources.PollInterval.Duration,
		Nudge:        countNudges(nudges, nudgeKubelet(f.servers())),
		OnList:       c.Metrics.observeList,
		Logger:       logger.With("component", "podwatch"),
	})
	b.pods = f.watcher
	return f, conn.Close, nil
}

// makeUnits makes the GPU machine type's resource, where one is
// configured; its NICs leave the NIC resource.
func (f *Front) makeUnits(c Config) error {
	if len(c.Settings.GPU.MachineTypes) == 0 {
		return nil
	}
	units, notes, err := newUnitResource(f.b, c.Settings, c.Node, os.DirFS(c.SysfsRoot), os.DirFS(c.ProcRoot),
		os.DirFS(c.DevRoot), c.DevRoot, c.NICs, c.Healthy)
	for _, note := range notes {
		f.logger.Info("GPU machine types", "note", note)
	}
	if err != nil {
		return err
	}
	f.units = units
	f.unitNICs = map[string]bool{}
	for _, u := range units.carving.Units {
		for _, n := range u.NICs {
			f.unitNICs[n.Name] = true
		}
	}
	for id, name := range f.b.devNIC {
		if f.unitNICs[name] {
			delete(f.b.devNIC, id) // the NIC resource does not offer unit NICs
		}
	}
	f.b.resolve[units.name] = units.resolve
	f.logger.Info("GPU machine type", "resource", units.name, "units", len(units.carving.Units), "mode", units.mode,
		"excluded_gpus", len(units.carving.Excluded), "nic_resource_nics", len(c.NICs)-len(f.unitNICs))
	return nil
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

// countNudges counts into c (where not nil) the nudges that nudge sends.
func countNudges(c *prometheus.CounterVec, nudge func(resource string)) func(resource string) {
	return func(resource string) {
		if c != nil {
			c.WithLabelValues(resource).Inc()
		}
		nudge(resource)
	}
}

// servers are the device-plugin servers, the NIC resource's first.
func (f *Front) servers() []*deviceplugin.Server {
	if f.unitServer != nil {
		return []*deviceplugin.Server{f.server, f.unitServer}
	}
	return []*deviceplugin.Server{f.server}
}

// Start reconciles the driver with the record, through the engine, before
// the kubelet is served.
func (f *Front) Start(ctx context.Context, _ func(error)) error {
	rep, err := f.b.Reconcile(ctx, f.reconcile)
	if err != nil {
		return fmt.Errorf("start-up reconcile: %w", err)
	}
	f.logger.Info("reconciled with the driver", "kept", rep.Kept, "adopted", rep.Adopted, "recreated", rep.Recreated,
		"destroyed", rep.Destroyed, "cleaned_pods", rep.CleanedPods, "foreign", rep.Foreign)
	if f.units != nil {
		f.reg.MustRegister(newUnitCollector(f.units, func() map[string]bool { return heldIDs(f.watcher.Latest(), f.units.name) }))
	}
	f.HealthChanged()
	return nil
}

// Loops are the pod watch, the cleanup of gone pods, the servers, and the
// NRI connection where there is one.
func (f *Front) Loops(ctx context.Context) []func() error {
	loops := []func() error{
		func() error { return f.watcher.Run(ctx) },
		func() error {
			retry := time.NewTicker(f.retryStuck)
			defer retry.Stop()
			f.b.RunCleanup(ctx, f.watcher.Changes(), retry.C)
			return nil
		},
		func() error { return deviceplugin.RunAll(ctx, f.servers()...) },
	}
	if f.nri != nil {
		loops = append(loops, func() error { return nri.Run(ctx, nriFront{f.b}, f.nri, f.logger.With("component", "nri")) })
	}
	return loops
}

// HealthChanged sends the kubelet the devices with their NICs' health.
func (f *Front) HealthChanged() {
	f.server.Update(f.devices())
	if f.unitServer != nil {
		f.unitServer.Update(f.units.devices())
	}
}

// Serving reports whether the NIC resource is registered with the kubelet.
func (f *Front) Serving() bool { return f.server.Status().Serving }

// NotReady says why containers cannot be checked: with NRI asked for, it
// is not connected. Without NRI, "": the device plugin binds at
// PreStartContainer, as it always has.
func (f *Front) NotReady() string {
	if f.nri == nil {
		return ""
	}
	if err := f.nri.Ready(); err != nil {
		return err.Error()
	}
	return ""
}

// Report adds the front end's part to the agent's inspect view: the
// shares pods hold of each NIC, and the GPU units.
func (f *Front) Report(_ context.Context, r *inspect.Report) {
	held := map[string]int{}
	for _, p := range f.watcher.Latest().Pods {
		for _, byRes := range p.Containers {
			for _, id := range byRes[f.res.name] {
				held[f.b.devNIC[id]]++
			}
		}
	}
	for i := range r.NICs {
		r.NICs[i].Allocated, r.NICs[i].Shares = held[r.NICs[i].Name], f.shares
	}
	if f.units != nil {
		r.Units = f.units.report(heldIDs(f.watcher.Latest(), f.units.name))
	}
}

// Reload applies a changed configuration's policy, and the node pool's
// mode, at once.
func (f *Front) Reload(c config.Config) {
	f.b.setPolicy(policyFrom(c))
	if f.units == nil {
		return
	}
	m, err := gpu.ForNode(c.GPU, f.node)
	switch {
	case err != nil || m.ResourceName != f.units.name:
		f.logger.Warn("a change of this node's machine type takes effect at the next agent start")
	case f.units.setMode(m.Mode):
		f.logger.Info("node pool mode changed", "mode", m.Mode, "resource", f.units.name)
		f.unitServer.Update(f.units.devices())
	}
}

// Stop has nothing to release: the servers stop with their loop.
func (f *Front) Stop() {}

// Describe is what the agent's "ready" line says of the front end.
func (f *Front) Describe() []any {
	d := []any{"api", "deviceplugin", "resource", f.res.name}
	if f.nri != nil {
		d = append(d, "nri_socket", f.nri.Socket())
	}
	return d
}

// devices are the NIC resource's devices: every share of every NIC that
// no GPU unit holds, healthy as its NIC.
func (f *Front) devices() []deviceplugin.Device {
	var devs []deviceplugin.Device
	for _, n := range f.nics {
		if f.unitNICs[n.Name] {
			continue
		}
		healthy := f.healthy(n.Name)
		for s := range f.shares {
			devs = append(devs, deviceplugin.Device{ID: nicDeviceID(n, s, f.shares), Healthy: healthy, NUMANodes: numaNodes(n.NUMANode)})
		}
	}
	return devs
}

// topology maps each device ID to its NUMA nodes, for preferred
// allocation.
func (f *Front) topology() map[string][]int64 {
	topo := map[string][]int64{}
	for _, d := range f.devices() {
		topo[d.ID] = d.NUMANodes
	}
	return topo
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

// policyFrom is the configuration's part this front end reads: the
// fallback member and the hsn interface.
func policyFrom(c config.Config) policy {
	var p policy
	if h := c.NICResource.HSNInterface; h.Enabled {
		p.hsn = map[string]engine.HSNPolicy{c.NICResource.Name: engine.HSNPolicyOf(h)}
	}
	switch {
	case c.Membership.FallbackUID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberUID, ID: *c.Membership.FallbackUID}
	case c.Membership.FallbackGID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberGID, ID: *c.Membership.FallbackGID}
	}
	return p
}

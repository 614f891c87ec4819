package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/health"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// CheckpointName is the agent's checkpoint file in the state directory.
const CheckpointName = "checkpoint.json"

// Run runs the agent until ctx ends. It returns an error when it cannot
// start (bad configuration, unreadable checkpoint, driver unreachable) or
// when a part it cannot do without fails. Everything is built, and every
// error of building reported, before anything runs.
func Run(ctx context.Context, opts Options, logger *slog.Logger) error {
	a, err := build(ctx, opts, logger)
	if err != nil {
		a.close()
		return err
	}
	defer a.close() // after every loop has returned
	return a.run(ctx)
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
	p := policy{tcs: tcs, jobs: jobpolicy.New(c), adjust: c.JobOptions.Adjust()}
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
	if h := c.NICResource.HSNInterface; h.Enabled {
		mode := hsnlink.Macvlan
		if h.Mode == "ipvlan" {
			mode = hsnlink.IPVLAN
		}
		p.hsn = map[string]hsnPolicy{c.NICResource.Name: {mode: mode, name: h.Name, pool: h.Pool, mtu: h.MTU}}
	}
	switch {
	case c.Membership.FallbackUID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberUID, ID: *c.Membership.FallbackUID}
	case c.Membership.FallbackGID != nil:
		p.fallback = &cxi.Member{Type: cxi.MemberGID, ID: *c.Membership.FallbackGID}
	}
	return p
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
	r := &inspect.Report{Node: b.node, Version: version.Version, Ready: ready, Generated: time.Now().UTC()}
	held := map[string]int{}
	var pods map[string]*podwatch.Pod
	if w != nil { // nil in DRA mode
		pods = w.Latest().Pods
	}
	for _, p := range pods {
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
	for _, p := range b.eng.Holders(checkpoint.KindPod) {
		key := p.ID()
		st := "running"
		if p.Exited != nil {
			st = "cleaning up"
		}
		ip := inspect.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, VNI: p.VNI, Scope: p.Scope, State: st,
			Collectives: engine.CollectivesJobID(p.CollEnv)}
		if h := p.HSN; h != nil {
			ip.HSN = fmt.Sprintf("%s %s on %s", h.Name, h.Address, h.Parent)
		}
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
				VNIs: s.VNIs, Members: memberStrings(s), Pod: podOf[name][s.ID], TCs: s.TCs.String(), Reserved: reservedOf(s)})
		}
		r.Reservations = append(r.Reservations, reservationsOf(name, b.nics[name].drv, svcs)...)
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

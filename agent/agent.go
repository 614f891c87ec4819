package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/health"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
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

// policy is the configuration's part the engine and the claims read, in
// both modes: the node's service defaults and what a job may ask for. It
// is swapped whole when the configuration reloads.
type policy struct {
	defaults engine.Defaults
	jobs     *jobpolicy.Policy
	// hsn is the hsn interfaces a claim's pod gets (DRA); nil: none. The
	// device plugin reads the same setting per resource (devplugin's).
	hsn *engine.HSNPolicy
}

// policyFrom turns the configuration into the policy.
func policyFrom(c config.Config) policy {
	var tcs cxi.TrafficClasses
	for _, name := range c.TrafficClasses {
		t, err := cxi.ParseTrafficClasses(name)
		if err == nil {
			tcs |= t
		}
	}
	p := policy{defaults: engine.Defaults{TCs: tcs, Adjust: c.JobOptions.Adjust()}, jobs: jobpolicy.New(c)}
	if h := c.NICResource.HSNInterface; h.Enabled {
		hp := engine.HSNPolicyOf(h)
		p.hsn = &hp
	}
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
		p.defaults.Limits = &l
	}
	return p
}

// inventory is the NICs the agent serves and their health, which the
// front end advertises. It is safe for concurrent use.
type inventory struct {
	nics []sysfs.NIC

	mu     sync.Mutex
	health map[string]nicHealth
}

type nicHealth struct {
	healthy bool
	reason  string
}

func newInventory(nics []sysfs.NIC) *inventory {
	inv := &inventory{nics: nics, health: map[string]nicHealth{}}
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

// report is the inspect view of what both front ends share: the NICs and
// their health, the pods the engine holds, every service the drivers
// list; the front end adds its own (Report).
func (a *parts) commonReport(ctx context.Context, ready bool) *inspect.Report {
	r := &inspect.Report{Node: a.opts.NodeName, Version: version.Version, Ready: ready, Generated: time.Now().UTC()}
	inv := a.inv
	inv.mu.Lock()
	for _, n := range inv.nics {
		h := inv.health[n.Name]
		in := inspect.NIC{Name: n.Name, PCIAddress: n.PCIAddress, NUMANode: n.NUMANode, Link: n.Properties.Link,
			SpeedMbps: n.Properties.SpeedMbps, Healthy: h.healthy, Reason: h.reason, Shares: 1}
		if n.NetDev != nil {
			in.NetDev = n.NetDev.Name
		}
		r.NICs = append(r.NICs, in)
	}
	inv.mu.Unlock()

	podOf := map[string]map[uint32]string{}
	for _, p := range a.eng.Holders(checkpoint.KindPod) {
		key := p.ID()
		st := "running"
		if p.Exited != nil {
			st = "cleaning up"
		}
		ip := inspect.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, VNI: p.VNI, Scope: p.Scope, State: st,
			Collectives: engine.CollectivesJobID(p.CollEnv)}
		var hsn []string
		for _, l := range p.HSNLinks() {
			hsn = append(hsn, fmt.Sprintf("%s %s on %s", l.Name, l.Address, l.Parent))
		}
		ip.HSN = strings.Join(hsn, ", ")
		for _, s := range p.Services {
			ip.NICs = append(ip.NICs, s.NIC)
			if podOf[s.NIC] == nil {
				podOf[s.NIC] = map[uint32]string{}
			}
			podOf[s.NIC][s.ID] = key
		}
		r.Pods = append(r.Pods, ip)
	}

	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, n := range a.nics.byIndex() {
		svcs, err := n.drv.List(ctx)
		if err != nil {
			continue
		}
		for _, s := range svcs {
			r.Services = append(r.Services, inspect.Service{NIC: n.name, ID: s.ID, Enabled: s.Enabled, System: s.System,
				VNIs: s.VNIs, Members: memberStrings(s), Pod: podOf[n.name][s.ID], TCs: s.TCs.String(), Reserved: reservedOf(s)})
		}
		r.Reservations = append(r.Reservations, reservationsOf(n.name, n.drv, svcs)...)
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

// handles makes a netns.Finder the front end's (devplugin.NetnsFinder).
type handles struct{ netns.Finder }

func (h handles) Open(ctx context.Context, podUID string) (engine.Handle, error) {
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

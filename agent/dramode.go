package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/dra"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/nri"
	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// draFront is the agent's DRA front end (--api=dra): the kubelet plugin
// and its ResourceSlice, the NRI plugin that binds at the sandbox, and the
// collector of claims the kubelet lost.
type draFront struct {
	a    *parts
	mgr  *dra.Manager
	kube kubernetes.Interface
	// roots are the NICs' PCIe root complexes, by NIC name.
	roots map[string]string
	// nri is the runtime's NRI connection: without it no claim can be
	// bound, so the agent is not ready and Prepare is refused.
	nri *nri.State
	// status writes the prepared claims' status.devices.
	status *dra.StatusQueue
	// pods are this node's pods' labels, for sharing a Job's lease.
	pods *podMetaWatch

	mu  sync.Mutex  // guards drv and ctx
	drv *dra.Driver // nil until start registers it
	// ctx is the run's, from start: a republish on a health change stops
	// with the agent.
	ctx context.Context
}

// buildDRA makes the DRA front end over the binder's NICs and the
// controller client: no device-plugin server and no PodResources watch,
// since a node serves its NICs through one API only.
func (a *parts) buildDRA(context.Context) error {
	if n := len(a.eng.Holders(checkpoint.KindPod)); n > 0 {
		return fmt.Errorf("--api=dra: the checkpoint records %d pods bound through the device plugin; switch a node's API once its pods are drained (slingshot-agent inspect lists them)", n)
	}
	if len(a.cfg.GPU.MachineTypes) > 0 {
		a.logger.Warn("--api=dra serves the NICs only; GPU machine types are served through the device plugin (--api=deviceplugin)")
	}
	kube := a.kube
	pods, err := newPodMetaWatch(a.kcfg, a.opts.NodeName)
	if err != nil {
		return err
	}
	w, err := a.draCDI()
	if err != nil {
		return err
	}
	metrics, err := dra.NewMetrics(a.reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	nri := dra.NewNRIState(a.opts.NRISocket, metrics).WithEvents(a.events, a.opts.NodeName)
	status := dra.NewStatusQueue(dra.APIClaimStatus{Client: kube, Driver: a.opts.DRADriverName}, a.logger.With("component", "dra-status"), metrics)
	nics, roots, err := a.draNICs()
	if err != nil {
		return err
	}
	cfg := dra.ManagerConfig{
		Driver: a.opts.DRADriverName, Node: a.opts.NodeName, Engine: a.eng,
		NICs: nics, PodMeta: pods.meta, CDI: w, BindReady: nri.Ready,
		Jobs:   func() *jobpolicy.Policy { return a.pol.Load().jobs },
		HSN:    func() *engine.HSNPolicy { return a.pol.Load().hsn },
		Logger: a.logger.With("component", "dra"), Metrics: metrics,
		Events: a.events, Status: status,
		OpenNetns: a.openHostNetns,
	}
	if a.opts.DRAPodGroupClaims {
		cfg.GroupClaim = dra.APIGroupClaims{APIClaims: dra.APIClaims{Client: kube}, Driver: a.opts.DRADriverName}.Of
	}
	mgr, err := dra.NewManager(cfg)
	if err != nil {
		return fmt.Errorf("DRA front end: %w", err)
	}
	a.fe = &draFront{a: a, mgr: mgr, kube: kube, roots: roots, nri: nri, status: status, pods: pods}
	return nil
}

// draCDI is the CDI writer of the claims' specs: the one buildNICs made
// and the agent closes (parts.closers), not a second that nobody would.
// DRA hands a claim's devices and environment to its containers only
// through CDI, so without it no claim could be served: refused, rather
// than writing specs that cdi.enabled says are off.
func (a *parts) draCDI() (*cdispec.Writer, error) {
	if a.cdi == nil {
		return nil, errors.New("--api=dra needs CDI: a claim's device and environment reach its containers only through a CDI spec (set cdi.enabled: true)")
	}
	return a.cdi, nil
}

// draNICs are the served NICs as the claims' Manager takes them, with
// their PCIe root complexes by name. Every NIC's driver makes services
// unbound and binds them later: both front ends' services go through the
// engine's Fabric, whose Driver type says so.
func (a *parts) draNICs() ([]dra.NICDevice, map[string]string, error) {
	var nics []dra.NICDevice
	roots := map[string]string{}
	tree := pcisysfs.NewTree(os.DirFS(a.opts.SysfsRoot))
	for _, n := range a.served {
		if a.nics[n.Name] == nil {
			return nil, nil, fmt.Errorf("--api=dra: NIC %s is served but not opened", n.Name)
		}
		dev := dra.NICDevice{Name: n.Name, DevPath: filepath.Join(a.opts.DevRoot, n.Name)}
		if n.NetDev != nil {
			dev.Netdev = n.NetDev.Name
		}
		nics = append(nics, dev)
		if _, topo, err := tree.Locate(n.PCIAddress); err == nil {
			roots[n.Name] = topo.Root
		} else {
			a.logger.Warn("PCIe root of a NIC unknown; its device has no pcieRoot attribute", "nic", n.Name, "err", err)
		}
	}
	return nics, roots, nil
}

// draDevices are the node's devices as its ResourceSlice lists them, with
// the NICs' health as taints.
func (d *draFront) devices() []dra.NIC {
	a := d.a
	a.inv.mu.Lock()
	defer a.inv.mu.Unlock()
	out := make([]dra.NIC, 0, len(a.inv.nics))
	for _, n := range a.inv.nics {
		nic := dra.NIC{Name: n.Name, PCIAddress: n.PCIAddress, PCIeRoot: d.roots[n.Name], NUMANode: n.NUMANode,
			NID: n.Properties.NID, LinkSpeedMbps: n.Properties.SpeedMbps, Cassini: n.Generation.String(),
			Services: n.Properties.RGIDsAvail, TLEs: n.Properties.Max.TLEs}
		if n.NetDev != nil {
			nic.NetDev = n.NetDev.Name
		}
		if h := a.inv.health[n.Name]; !h.healthy {
			nic.Unhealthy = h.reason
			if nic.Unhealthy == "" {
				nic.Unhealthy = "unhealthy"
			}
		}
		out = append(out, nic)
	}
	return out
}

func (d *draFront) Start(ctx context.Context, fatal func(error)) error {
	a := d.a
	klog.SetSlogLogger(a.logger.With("component", "dra-helper"))
	rep, err := d.mgr.Reconcile(ctx, a.managedLo, a.managedHi)
	if err != nil {
		return fmt.Errorf("start-up reconcile of the claims: %w", err)
	}
	a.logger.Info("reconciled claims with the driver", "kept", rep.Kept, "recreated", rep.Recreated,
		"unprepares_finished", rep.Finished, "orphans_destroyed", rep.Orphans, "namespaces_held", rep.Held, "unbound_gone", rep.Unbound)
	drv, err := dra.Start(ctx, dra.DriverConfig{
		Driver: a.opts.DRADriverName, Node: a.opts.NodeName, KubeletDir: a.opts.KubeletDir,
		Kube: d.kube, Manager: d.mgr, Logger: a.logger.With("component", "dra"), Fatal: fatal,
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.drv, d.ctx = drv, ctx
	d.mu.Unlock()
	d.publish(ctx)
	return nil
}

// publish replaces the node's ResourceSlice with the NICs as they are.
func (d *draFront) publish(ctx context.Context) {
	d.mu.Lock()
	drv := d.drv
	d.mu.Unlock()
	if drv == nil {
		return
	}
	devs := dra.Devices(d.a.opts.DRADriverName, d.devices())
	if d.a.opts.DRABindingConditions {
		dra.AwaitVNILease(devs)
	}
	if err := drv.Publish(ctx, devs); err != nil {
		d.a.logger.Error("publish ResourceSlice", "err", err)
	}
}

func (d *draFront) Loops(ctx context.Context) []func() error {
	grace := d.a.opts.DRALostClaimGrace
	collector := &dra.Collector{M: d.mgr, Claims: dra.APIClaims{Client: d.kube}, Grace: grace, Now: time.Now}
	return []func() error{
		func() error { return nri.Run(ctx, d.mgr.NRI(), d.nri, d.a.logger.With("component", "nri")) },
		func() error { return collector.Run(ctx, grace/5) },
		func() error { return d.status.Run(ctx) },
		func() error { return d.pods.run(ctx) },
	}
}

// HealthChanged republishes the ResourceSlice: a NIC's health is its
// device taint, which the scheduler reads.
func (d *draFront) HealthChanged() {
	d.mu.Lock()
	ctx := d.ctx
	d.mu.Unlock()
	if ctx != nil {
		d.publish(ctx)
	}
}

func (d *draFront) Serving() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv != nil && d.drv.Registered()
}

func (d *draFront) NotReady() string {
	if err := d.nri.Ready(); err != nil {
		return err.Error()
	}
	return ""
}

func (d *draFront) Reload(config.Config) {}

func (d *draFront) Stop() {
	d.mu.Lock()
	drv := d.drv
	d.mu.Unlock()
	if drv != nil {
		drv.Stop()
	}
}

func (d *draFront) Describe() []any {
	a := d.a
	return []any{"api", APIDRA, "driver_name", a.opts.DRADriverName, "nri_socket", a.opts.NRISocket,
		"kubelet_plugins", filepath.Join(a.opts.KubeletDir, "plugins", a.opts.DRADriverName)}
}

// Report adds the claims to the inspect view.
func (d *draFront) Report(_ context.Context, r *inspect.Report) {
	for _, rec := range d.mgr.Records() {
		c := inspect.Claim{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, VNI: rec.VNI, Scope: rec.Scope, BoundPod: rec.BoundPod,
			Collectives: engine.CollectivesJobID(rec.CollEnv)}
		for _, res := range rec.Results {
			c.Devices = append(c.Devices, res.Device)
		}
		for _, s := range rec.Services {
			v := s.NIC + ":" + strconv.FormatUint(uint64(s.ID), 10)
			if s.Netns != 0 {
				v += "@" + strconv.FormatUint(uint64(s.Netns), 10)
			}
			c.Services = append(c.Services, v)
		}
		switch {
		case rec.Unpreparing:
			c.State = "unpreparing"
		case !rec.Prepared:
			c.State = "preparing"
		case rec.BoundPod != "":
			c.State = "bound"
		default:
			c.State = "prepared"
		}
		r.Claims = append(r.Claims, c)
	}
}

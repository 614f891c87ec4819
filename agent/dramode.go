package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/dra"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/internal/pcisysfs"
)

// lostClaimGrace is how long the API server must have stopped allocating a
// prepared claim to this node, read twice, before the agent unprepares it
// itself (the kubelet lost its claim state and will never ask).
const lostClaimGrace = 5 * time.Minute

// draParts are the agent's DRA front end (--api=dra).
type draParts struct {
	mgr  *dra.Manager
	kube kubernetes.Interface
	// roots are the NICs' PCIe root complexes, by NIC name.
	roots map[string]string
	drv   *dra.Driver // nil until run registers it
	// nri is the runtime's NRI connection: without it no claim can be
	// bound, so the agent is not ready and Prepare is refused.
	nri *dra.NRIState
}

func (d *draParts) registered() bool {
	if d.drv == nil {
		return false
	}
	return d.drv.Registered()
}

// buildDRA makes the DRA front end over the binder's NICs and the
// controller client: no device-plugin server and no PodResources watch,
// since a node serves its NICs through one API only.
func (a *parts) buildDRA(context.Context) error {
	if n := len(a.b.store.Pods()); n > 0 {
		return fmt.Errorf("--api=dra: the checkpoint records %d pods bound through the device plugin; switch a node's API once its pods are drained (slingshot-agent inspect lists them)", n)
	}
	if len(a.cfg.GPU.MachineTypes) > 0 {
		a.logger.Warn("--api=dra serves the NICs only; GPU machine types are served through the device plugin (--api=deviceplugin)")
	}
	a.inv = newInventory(a.served, 1)
	kcfg, err := kubeConfig(a.opts.Kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	cdiDir := a.cfg.CDI.SpecDir
	w, err := cdispec.New(cdiDir, a.cfg.NICResource.Name)
	if err != nil {
		return err
	}
	metrics, err := dra.NewMetrics(a.reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	nri := dra.NewNRIState(a.opts.NRISocket, metrics)
	var nics []dra.NICDevice
	roots := map[string]string{}
	tree := pcisysfs.NewTree(os.DirFS(a.opts.SysfsRoot))
	for _, n := range a.served {
		nd := a.b.nics[n.Name]
		nics = append(nics, dra.NICDevice{Name: n.Name, DevPath: nd.devPath, Drv: nd.drv.(dra.Services)})
		if _, topo, err := tree.Locate(n.PCIAddress); err == nil {
			roots[n.Name] = topo.Root
		} else {
			a.logger.Warn("PCIe root of a NIC unknown; its device has no pcieRoot attribute", "nic", n.Name, "err", err)
		}
	}
	mgr, err := dra.NewManager(dra.ManagerConfig{
		Driver: a.opts.DRADriverName, Node: a.opts.NodeName, Store: a.b.store,
		NICs: nics, Leases: a.b.leases, CDI: w, BindReady: nri.Ready,
		Policy: func() dra.Policy {
			p := a.b.policy()
			return dra.Policy{TCs: p.tcs, Limits: p.limits}
		},
		Logger: a.logger.With("component", "dra"), Metrics: metrics,
		// NRI names the sandbox's namespace by its host path
		// (/var/run/netns/cni-...), which the agent's container reaches
		// through the host's root, <proc-root>/1/root, resolving links there.
		OpenNetns: func(path string) (dra.Netns, error) {
			p, err := netns.ResolveInRoot(filepath.Join(a.opts.ProcRoot, "1", "root"), path)
			if err != nil {
				return nil, fmt.Errorf("network namespace %s on the host: %w", path, err)
			}
			return dra.OpenNetns(p)
		},
	})
	if err != nil {
		return fmt.Errorf("DRA front end: %w", err)
	}
	a.dra = &draParts{mgr: mgr, kube: kube, roots: roots, nri: nri}
	return nil
}

// kubeConfig is the kubeconfig file's configuration, or the in-cluster one.
func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--api=dra needs the Kubernetes API: no --kubeconfig and not in a pod: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// draDevices are the node's devices as its ResourceSlice lists them, with
// the NICs' health as taints.
func (a *parts) draDevices() []dra.NIC {
	a.inv.mu.Lock()
	defer a.inv.mu.Unlock()
	out := make([]dra.NIC, 0, len(a.inv.nics))
	for _, n := range a.inv.nics {
		d := dra.NIC{Name: n.Name, PCIAddress: n.PCIAddress, PCIeRoot: a.dra.roots[n.Name], NUMANode: n.NUMANode,
			NID: n.Properties.NID, LinkSpeedMbps: n.Properties.SpeedMbps, Cassini: n.Generation.String(),
			Services: n.Properties.RGIDsAvail, TLEs: n.Properties.Max.TLEs}
		if n.NetDev != nil {
			d.NetDev = n.NetDev.Name
		}
		if h := a.inv.health[n.Name]; !h.healthy {
			d.Unhealthy = h.reason
			if d.Unhealthy == "" {
				d.Unhealthy = "unhealthy"
			}
		}
		out = append(out, d)
	}
	return out
}

// runDRA runs the agent in DRA mode until ctx ends: the controller
// client, the start-up reconcile of the claims, then the kubelet plugin,
// the ResourceSlice, the NRI plugin and the health and admin loops, each
// owned by one errgroup.
func (a *parts) runDRA(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	klog.SetSlogLogger(a.logger.With("component", "dra-helper"))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.client.Run(gctx) })
	rep, err := a.dra.mgr.Reconcile(gctx, a.managedLo, a.managedHi)
	if err != nil {
		cancel(err)
		return errors.Join(fmt.Errorf("start-up reconcile of the claims: %w", err), g.Wait())
	}
	a.logger.Info("reconciled claims with the driver", "kept", rep.Kept, "recreated", rep.Recreated,
		"unprepares_finished", rep.Finished, "orphans_destroyed", rep.Orphans, "namespaces_held", rep.Held, "unbound_gone", rep.Unbound)
	drv, err := dra.Start(gctx, dra.DriverConfig{
		Driver: a.opts.DRADriverName, Node: a.opts.NodeName, KubeletDir: a.opts.KubeletDir,
		Kube: a.dra.kube, Manager: a.dra.mgr, Logger: a.logger.With("component", "dra"),
		Fatal: func(err error) { cancel(err) },
	})
	if err != nil {
		cancel(err)
		return errors.Join(err, g.Wait())
	}
	a.dra.drv = drv
	defer drv.Stop()
	publish := func() {
		if err := drv.Publish(gctx, dra.Devices(a.opts.DRADriverName, a.draDevices())); err != nil {
			a.logger.Error("publish ResourceSlice", "err", err)
		}
	}
	publish()
	if a.lis != nil {
		a.logger.Info("serving metrics, health and inspect", "addr", a.lis.Addr().String())
		g.Go(a.serveHTTP)
		g.Go(func() error { return a.shutdownHTTP(gctx) })
	}
	g.Go(func() error { return dra.RunNRI(gctx, a.dra.mgr, a.dra.nri, a.logger.With("component", "nri")) })
	g.Go(func() error { return a.runIPAM(gctx) })
	collector := &dra.Collector{M: a.dra.mgr, Claims: dra.APIClaims{Client: a.dra.kube}, Grace: lostClaimGrace, Now: time.Now}
	g.Go(func() error { return collector.Run(gctx, lostClaimGrace/5) })
	g.Go(func() error { return a.mon.Run(gctx) })
	g.Go(func() error {
		for ev := range a.mon.Events() {
			if a.inv.setHealth(ev.NIC, ev.Healthy, ev.Reason) {
				a.logger.Info("NIC health changed; republishing its taint", "nic", ev.NIC, "healthy", ev.Healthy, "reason", ev.Reason)
				publish()
			}
			a.m.nicSpeed.WithLabelValues(ev.NIC).Set(float64(ev.Status.SpeedMbps))
		}
		return nil
	})
	a.dsvc.check(gctx)
	g.Go(func() error { return a.dsvc.run(gctx, a.cfg.Health.PollInterval.Duration) })
	if a.cfgWatcher != nil {
		g.Go(func() error { return a.cfgWatcher.Run(gctx) })
	}
	a.ready.Store(true)
	a.m.ready.Set(1)
	a.logger.Info("agent ready", "node", a.opts.NodeName, "api", APIDRA, "driver_name", a.opts.DRADriverName,
		"nics", len(a.served), "nri_socket", a.opts.NRISocket, "kubelet_plugins", filepath.Join(a.opts.KubeletDir, "plugins", a.opts.DRADriverName))

	err = g.Wait()
	a.dra.mgr.Close()
	a.m.ready.Set(0)
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

// report adds the claims to the inspect view.
func (d *draParts) report(r *inspect.Report) {
	for _, rec := range d.mgr.Records() {
		c := inspect.Claim{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, VNI: rec.VNI, Scope: rec.Scope, BoundPod: rec.BoundPod}
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

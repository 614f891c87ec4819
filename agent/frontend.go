package agent

import (
	"context"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/gpu"
)

// frontEnd serves the node's NICs to the kubelet through one API: the
// device plugin (pluginFront) or DRA (draFront, dramode.go). The agent
// builds one, as --api says, over the one bind engine; nothing of the
// other API is built, and run starts the front end's units beside the
// common ones.
type frontEnd interface {
	// start reconciles the driver with the record and begins serving the
	// kubelet; fatal stops the agent with an error a unit cannot mend.
	start(ctx context.Context, fatal func(error)) error
	// loops are the front end's units, each returning when ctx ends.
	loops(ctx context.Context) []func() error
	// healthChanged tells the kubelet (or the scheduler) of NIC health.
	healthChanged()
	// serving reports whether the kubelet is served.
	serving() bool
	// notReady says why the front end cannot keep its promises, or "".
	notReady() string
	// report is the inspect view, the front end's part included.
	report(ctx context.Context, ready bool) *inspect.Report
	// reload applies a changed configuration's part of the front end.
	reload(c config.Config)
	// stop releases what start took, after every unit returned.
	stop()
	// describe is what the "agent ready" line says of the front end.
	describe() []any
}

// pluginFront is the device-plugin front end: the NIC resource, the GPU
// machine type's where one is configured, their servers, and the pod
// watch that tells when a pod is gone.
type pluginFront struct {
	a          *parts
	res        *nicResource
	units      *unitResource        // nil without a GPU machine type
	unitServer *deviceplugin.Server // nil without a GPU machine type
	server     *deviceplugin.Server
	watcher    *podwatch.Watcher
}

// servers are the device-plugin servers, the NIC resource's first.
func (f *pluginFront) servers() []*deviceplugin.Server {
	if f.unitServer != nil {
		return []*deviceplugin.Server{f.server, f.unitServer}
	}
	return []*deviceplugin.Server{f.server}
}

func (f *pluginFront) start(ctx context.Context, _ func(error)) error {
	if err := f.a.reconcile(ctx); err != nil {
		return err
	}
	if f.units != nil {
		f.a.reg.MustRegister(newUnitCollector(f.units, func() map[string]bool { return heldIDs(f.watcher.Latest(), f.units.name) }))
	}
	f.healthChanged()
	return nil
}

func (f *pluginFront) loops(ctx context.Context) []func() error {
	return []func() error{
		func() error { return f.watcher.Run(ctx) },
		func() error {
			retry := time.NewTicker(f.a.cfg.Cleanup.RetryStuckEvery.Duration)
			defer retry.Stop()
			f.a.b.RunCleanup(ctx, f.watcher.Changes(), retry.C)
			return nil
		},
		func() error { return deviceplugin.RunAll(ctx, f.servers()...) },
	}
}

func (f *pluginFront) healthChanged() {
	f.server.Update(f.a.inv.devices())
	if f.unitServer != nil {
		f.unitServer.Update(f.units.devices())
	}
}

func (f *pluginFront) serving() bool { return f.server.Status().Serving }

func (f *pluginFront) notReady() string { return "" }

func (f *pluginFront) report(ctx context.Context, ready bool) *inspect.Report {
	r := f.a.b.report(ctx, f.a.inv, ready, f.watcher)
	if f.units != nil {
		r.Units = f.units.report(heldIDs(f.watcher.Latest(), f.units.name))
	}
	return r
}

// reload applies the node pool's mode at once.
func (f *pluginFront) reload(c config.Config) {
	if f.units == nil {
		return
	}
	m, err := gpu.ForNode(c.GPU, f.a.opts.NodeName)
	switch {
	case err != nil || m.ResourceName != f.units.name:
		f.a.logger.Warn("a change of this node's machine type takes effect at the next agent start")
	case f.units.setMode(m.Mode):
		f.a.logger.Info("node pool mode changed", "mode", m.Mode, "resource", f.units.name)
		f.unitServer.Update(f.units.devices())
	}
}

func (f *pluginFront) stop() {}

func (f *pluginFront) describe() []any {
	return []any{"api", APIDevicePlugin, "resource", f.res.name}
}

package devplugin

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
	"github.com/slingshot-k8s/slingshot/gpu"
)

// unitResource serves a GPU machine type (<domain>/<machine type>): each
// device is a unit of GPUs on one NUMA node with its nearest NICs, which
// get the same Slingshot binding as the NIC resource's.
type unitResource struct {
	name    string
	b       *binder
	carving *gpu.Carving
	payload gpu.PayloadOptions
	healthy func(nic string) bool

	mu   sync.Mutex
	mode string // the node pool mode; units are healthy only when ready
}

func (r *unitResource) Name() string { return r.name }

// Allocate returns the units' GPUs (device nodes or the vendor's CDI
// devices, and the selection environment) and their NICs' Slingshot
// allocation. It reads nothing but the device nodes' presence and writes
// nothing.
func (r *unitResource) Allocate(_ context.Context, req *pluginapi.ContainerAllocateRequest) (*pluginapi.ContainerAllocateResponse, error) {
	ids := req.GetDevicesIds()
	p, err := r.carving.Payload(ids, r.payload)
	if err != nil {
		return nil, err
	}
	nics, err := r.nicsOf(p.NICs)
	if err != nil {
		return nil, err
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	for k, v := range p.Env {
		resp.Envs[k] = v
	}
	for _, d := range p.Devices {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
	}
	for _, name := range p.CDIDevices {
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	// Units without NICs (nicsPerUnit 0) get nothing of Slingshot: an
	// empty SLINGSHOT_DEVICES, a traffic class or a CDI device whose spec
	// PreStartContainer never writes would tell the container's MPI of a
	// fabric it cannot use, or fail it.
	if len(nics) > 0 {
		r.b.addSlingshot(resp, ids, nics)
	}
	return resp, nil
}

// PreStartContainer binds the units' NICs for the pod, as for the NIC
// resource. Units without NICs have nothing to bind: no VNI is leased, no
// service made and no spec written for them, as Allocate gave them none.
func (r *unitResource) PreStartContainer(ctx context.Context, ids []string) error {
	nics, err := r.resolve(ids)
	if err != nil {
		return err
	}
	if len(nics) == 0 {
		return nil
	}
	return r.b.PreStart(ctx, r.name, ids)
}

// resolve maps unit IDs to their NICs, for the binder.
func (r *unitResource) resolve(ids []string) ([]*nic, error) {
	var names []string
	for _, id := range ids {
		u, ok := r.carving.Unit(id)
		if !ok {
			return nil, fmt.Errorf("unknown unit %q", id)
		}
		for _, n := range u.NICs {
			names = append(names, n.Name)
		}
	}
	return r.nicsOf(names)
}

func (r *unitResource) nicsOf(names []string) ([]*nic, error) {
	var out []*nic
	for _, name := range names {
		n := r.b.nics[name]
		if n == nil {
			return nil, fmt.Errorf("NIC %s of a unit is not served", name)
		}
		if !containsNIC(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func containsNIC(ns []*nic, n *nic) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}

// setMode applies a node pool mode from a reloaded configuration and
// reports whether it changed.
func (r *unitResource) setMode(mode string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := r.mode != mode
	r.mode = mode
	return changed
}

// devices are the units as the device plugin advertises them: healthy
// when the node pool mode is ready and every NIC of the unit is healthy.
func (r *unitResource) devices() []deviceplugin.Device {
	r.mu.Lock()
	ready := r.mode == config.ModeReady
	r.mu.Unlock()
	var devs []deviceplugin.Device
	for _, u := range r.carving.Units {
		healthy := ready
		for _, n := range u.NICs {
			healthy = healthy && r.healthy(n.Name)
		}
		devs = append(devs, deviceplugin.Device{ID: u.ID, Healthy: healthy, NUMANodes: numaNodes(u.NUMANode)})
	}
	return devs
}

// report lists the units for inspect; held are the allocated unit IDs.
func (r *unitResource) report(held map[string]bool) []inspect.Unit {
	health := map[string]bool{}
	for _, d := range r.devices() {
		health[d.ID] = d.Healthy
	}
	var out []inspect.Unit
	for _, u := range r.carving.Units {
		iu := inspect.Unit{MachineType: u.MachineType, ID: u.ID, NUMANode: u.NUMANode, Healthy: health[u.ID], Allocated: held[u.ID]}
		for _, g := range u.GPUs {
			iu.GPUs = append(iu.GPUs, g.PCIAddress)
		}
		for _, n := range u.NICs {
			iu.NICs = append(iu.NICs, n.Name)
		}
		out = append(out, iu)
	}
	return out
}

// unitCollector exports the machine type's usage, in the shape of the
// Imperator design's usage block, when scraped.
type unitCollector struct {
	r     *unitResource
	held  func() map[string]bool
	usage *prometheus.Desc
}

func newUnitCollector(r *unitResource, held func() map[string]bool) *unitCollector {
	return &unitCollector{r: r, held: held, usage: prometheus.NewDesc("slingshot_agent_machine_units",
		"GPU machine-type units on this node: maximum (carved), used (allocated), free (allocatable now).",
		[]string{"machine_type", "state"}, nil)}
}

func (c *unitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.usage }

func (c *unitCollector) Collect(ch chan<- prometheus.Metric) {
	u := c.r.carving.Usage(c.held(), nil)
	free := 0
	held := c.held()
	for _, d := range c.r.devices() {
		if d.Healthy && !held[d.ID] {
			free++
		}
	}
	mt := c.r.carving.MachineType.Name
	ch <- prometheus.MustNewConstMetric(c.usage, prometheus.GaugeValue, float64(u.Maximum), mt, "maximum")
	ch <- prometheus.MustNewConstMetric(c.usage, prometheus.GaugeValue, float64(u.Used), mt, "used")
	ch <- prometheus.MustNewConstMetric(c.usage, prometheus.GaugeValue, float64(free), mt, "free")
}

// newUnitResource discovers the node's GPUs and carves its machine type's
// units, or returns nil when the node has no machine type.
func newUnitResource(b *binder, cfg config.Config, node string, sysFS, procFS, devFS fs.FS, devRoot string, served []sysfs.NIC, healthy func(string) bool) (*unitResource, []string, error) {
	a, err := gpu.ForNode(cfg.GPU, node)
	if err != nil {
		return nil, []string{err.Error()}, nil
	}
	d, err := gpu.Discover(sysFS, procFS)
	if err != nil {
		return nil, nil, fmt.Errorf("discover GPUs: %w", err)
	}
	var notes []string
	if err := d.Err(); err != nil {
		notes = append(notes, "GPU discovery: "+err.Error())
	}
	nics, errs := gpu.NICsFromCXI(sysFS, served)
	for _, e := range errs {
		notes = append(notes, "NIC topology: "+e.Error())
	}
	c, err := gpu.CarveFor(a, d.GPUs, nics, cfg.GPU.ShareNICs)
	if err != nil {
		return nil, notes, fmt.Errorf("carve %s units: %w", a.MachineType.Name, err)
	}
	for _, e := range c.Excluded {
		notes = append(notes, e.Reason)
	}
	sel := gpu.ByIndex
	if cfg.GPU.SelectBy == "uuid" {
		sel = gpu.ByUUID
	}
	r := &unitResource{
		name: a.ResourceName, b: b, carving: c, healthy: healthy, mode: a.Mode,
		payload: gpu.PayloadOptions{DevRoot: devRoot, DevFS: devFS, CDI: cfg.GPU.CDI, Select: sel},
	}
	return r, notes, nil
}

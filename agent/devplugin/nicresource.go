package devplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
	"github.com/slingshot-k8s/slingshot/deviceplugin"
)

// ContainerDir is where a container finds its per-allocation directory,
// with the late-bound environment in EnvFileName.
const ContainerDir = "/var/run/slingshot"

// nicDeviceID is a NIC share's device-plugin ID. It derives from the PCI
// address, which the kubelet's checkpoint keeps across agent restarts and
// reboots; with one share per NIC it is the address itself.
func nicDeviceID(n sysfs.NIC, share, shares int) string {
	if shares <= 1 {
		return n.PCIAddress
	}
	return n.PCIAddress + "-s" + strconv.Itoa(share)
}

// nicResource is the NIC resource (hpe.com/cxi by default) that the
// device-plugin server serves.
type nicResource struct {
	name   string
	b      *binder
	shares int
	// topo maps device ID to NUMA nodes, for preferred allocation.
	topo map[string][]int64
}

var _ deviceplugin.PreferredAllocator = (*nicResource)(nil)

func (r *nicResource) Name() string { return r.name }

// Allocate maps the chosen NICs' device nodes and returns the environment
// that is already known, the per-container directory and the CDI device
// that will carry the late-bound values. It makes no network call and
// writes nothing: the pod does not exist yet.
func (r *nicResource) Allocate(_ context.Context, req *pluginapi.ContainerAllocateRequest) (*pluginapi.ContainerAllocateResponse, error) {
	ids := req.GetDevicesIds()
	nics, err := r.b.nicsOf(ids)
	if err != nil {
		return nil, err
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	r.b.addSlingshot(resp, ids, nics)
	return resp, nil
}

// addSlingshot adds to an Allocate response what a container needs for its
// NICs: their device nodes, the environment already known, the
// per-container directory and the CDI device that will carry the
// late-bound values. Both the NIC resource and the GPU units use it.
func (b *binder) addSlingshot(resp *pluginapi.ContainerAllocateResponse, ids []string, nics []*nic) {
	key := cdispec.AllocationKey(ids)
	resp.Envs[engine.EnvDevices] = strings.Join(nicNames(nics), ",")
	resp.Envs[engine.EnvTCs] = b.eng.TCs(checkpoint.Holder{}).String() // the node's: a pod's own options are known only at PreStart
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
		ContainerPath: ContainerDir,
		HostPath:      b.files.hostPath(key),
		ReadOnly:      true,
	})
	for _, n := range nics {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{
			ContainerPath: "/dev/" + n.name,
			HostPath:      n.devPath,
			Permissions:   "rw",
		})
	}
	if name, ok := b.files.cdiDevice(key); ok {
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
}

// PreStartContainer binds the container: see binder.PreStart.
func (r *nicResource) PreStartContainer(ctx context.Context, ids []string) error {
	return r.b.PreStart(ctx, r.name, ids)
}

// PreferredAllocation spreads a request over distinct NICs first: two
// shares of one NIC give a container no more bandwidth than one. The NICs
// are chosen by the device-plugin package's NUMA policy.
func (r *nicResource) PreferredAllocation(_ context.Context, available, mustInclude []string, size int) ([]string, error) {
	if r.shares <= 1 {
		return deviceplugin.PreferredAllocation(available, mustInclude, size, r.topo), nil
	}
	nicOf := func(id string) string { return r.b.devNIC[id] }
	free := map[string][]string{} // NIC → its available shares
	nicTopo := map[string][]int64{}
	for _, id := range available {
		n := nicOf(id)
		if n == "" {
			return nil, fmt.Errorf("unknown device %q", id)
		}
		free[n] = append(free[n], id)
		nicTopo[n] = r.topo[id]
	}
	var mustNICs []string
	for _, id := range mustInclude {
		if n := nicOf(id); n != "" && !slices.Contains(mustNICs, n) {
			mustNICs = append(mustNICs, n)
		}
	}
	nicNames := make([]string, 0, len(free))
	for n := range free {
		nicNames = append(nicNames, n)
	}
	want := min(size, len(nicNames))
	picked := deviceplugin.PreferredAllocation(nicNames, mustNICs, max(want, len(mustNICs)), nicTopo)

	out := slices.Clone(mustInclude)
	take := func(n string) bool {
		for _, id := range free[n] {
			if !slices.Contains(out, id) {
				out = append(out, id)
				return true
			}
		}
		return false
	}
	for _, n := range picked {
		if len(out) >= size {
			break
		}
		if !slices.ContainsFunc(out, func(id string) bool { return nicOf(id) == n }) {
			take(n)
		}
	}
	// More shares than NICs were asked for: fill from the picked NICs.
	for len(out) < size {
		progressed := false
		for _, n := range picked {
			if len(out) < size && take(n) {
				progressed = true
			}
		}
		if !progressed {
			return nil, nil // let the kubelet choose
		}
	}
	return out, nil
}

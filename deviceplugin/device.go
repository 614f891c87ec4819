package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// maxDeviceIDLen is the longest device ID the v1beta1 API allows.
const maxDeviceIDLen = 63

// Errors that Allocate and PreStartContainer report for a malformed request
// such as an empty or repeating ID list (ErrInvalidRequest, gRPC
// InvalidArgument), for device IDs that the server does not advertise
// (ErrUnknownDevice, InvalidArgument) or that are currently unhealthy
// (ErrUnhealthyDevice, FailedPrecondition). A Resource may wrap them too;
// the server maps them to the same codes.
var (
	ErrInvalidRequest  = errors.New("invalid request")
	ErrUnknownDevice   = errors.New("unknown device")
	ErrUnhealthyDevice = errors.New("unhealthy device")
)

// Device is one schedulable device as the kubelet sees it.
//
// ID must be stable across agent restarts (derive it from hardware identity
// such as a PCI address or serial number), at most 63 characters, and unique
// within a resource. NUMANodes lists the NUMA nodes the device is local to;
// empty means no affinity.
type Device struct {
	ID        string
	Healthy   bool
	NUMANodes []int64
}

// Resource is what a caller plugs into a [Server]: one extended resource.
type Resource interface {
	// Name returns the extended resource name, e.g. "hpe.com/cxi".
	Name() string
	// Allocate returns what the container needs for the devices in req
	// (device specs, mounts, environment, annotations, CDI devices). The
	// server has already checked that every ID is advertised and healthy.
	// It runs on the kubelet's admission path, so it must not wait on the
	// network.
	Allocate(ctx context.Context, req *pluginapi.ContainerAllocateRequest) (*pluginapi.ContainerAllocateResponse, error)
	// PreStartContainer runs before each start of a container that holds
	// deviceIDs, including restarts, so it must be idempotent.
	PreStartContainer(ctx context.Context, deviceIDs []string) error
}

// PreferredAllocator is an optional interface of a [Resource] that replaces
// the built-in [PreferredAllocation] policy. It returns size IDs taken from
// available that include every ID of mustInclude. A result that breaks
// these rules, or an error, makes the server fall back to the built-in
// policy (and log why).
type PreferredAllocator interface {
	PreferredAllocation(ctx context.Context, available, mustInclude []string, size int) ([]string, error)
}

// deviceSet is an immutable snapshot of the advertised devices. Update
// replaces the whole set, so readers never need to copy it.
type deviceSet struct {
	list    []Device // sorted by ID in natural order
	byID    map[string]*Device
	topo    map[string][]int64
	version uint64
	healthy int
}

// newDeviceSet copies devs into a snapshot. It drops devices with an empty,
// too long or duplicate ID and returns one error per dropped device.
func newDeviceSet(devs []Device, version uint64) (*deviceSet, []error) {
	set := &deviceSet{
		list:    make([]Device, 0, len(devs)),
		byID:    make(map[string]*Device, len(devs)),
		topo:    make(map[string][]int64, len(devs)),
		version: version,
	}
	var dropped []error
	seen := make(map[string]bool, len(devs))
	for _, d := range devs {
		switch {
		case d.ID == "":
			dropped = append(dropped, errors.New("device with empty ID"))
			continue
		case len(d.ID) > maxDeviceIDLen:
			dropped = append(dropped, fmt.Errorf("device ID %q longer than %d characters", d.ID, maxDeviceIDLen))
			continue
		case seen[d.ID]:
			dropped = append(dropped, fmt.Errorf("duplicate device ID %q", d.ID))
			continue
		}
		seen[d.ID] = true
		nodes := slices.Clone(d.NUMANodes)
		slices.Sort(nodes)
		nodes = slices.Compact(nodes)
		set.list = append(set.list, Device{ID: d.ID, Healthy: d.Healthy, NUMANodes: nodes})
	}
	slices.SortFunc(set.list, func(a, b Device) int { return naturalCompare(a.ID, b.ID) })
	for i := range set.list {
		d := &set.list[i]
		set.byID[d.ID] = d
		set.topo[d.ID] = d.NUMANodes
		if d.Healthy {
			set.healthy++
		}
	}
	return set, dropped
}

// sameDevices reports whether s and o advertise the same devices with the
// same health and topology.
func (s *deviceSet) sameDevices(o *deviceSet) bool {
	return slices.EqualFunc(s.list, o.list, func(a, b Device) bool {
		return a.ID == b.ID && a.Healthy == b.Healthy && slices.Equal(a.NUMANodes, b.NUMANodes)
	})
}

// pluginDevices converts the snapshot to the kubelet's wire form.
func (s *deviceSet) pluginDevices() []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(s.list))
	for i, d := range s.list {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy}
		if d.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if len(d.NUMANodes) > 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: make([]*pluginapi.NUMANode, len(d.NUMANodes))}
			for j, n := range d.NUMANodes {
				pd.Topology.Nodes[j] = &pluginapi.NUMANode{ID: n}
			}
		}
		out[i] = pd
	}
	return out
}

// check returns an error wrapping ErrUnknownDevice or ErrUnhealthyDevice
// for the first ID that is not advertised, or not healthy when
// requireHealthy is set, and ErrInvalidRequest for an empty or repeating
// list.
func (s *deviceSet) check(ids []string, requireHealthy bool) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: no device IDs", ErrInvalidRequest)
	}
	for i, id := range ids {
		d, ok := s.byID[id]
		if !ok {
			return fmt.Errorf("%w %q", ErrUnknownDevice, id)
		}
		if requireHealthy && !d.Healthy {
			return fmt.Errorf("%w %q", ErrUnhealthyDevice, id)
		}
		if slices.Contains(ids[:i], id) {
			return fmt.Errorf("%w: device %q requested twice", ErrInvalidRequest, id)
		}
	}
	return nil
}

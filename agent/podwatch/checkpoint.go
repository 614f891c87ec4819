package podwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
)

// KubeletCheckpointName is the device manager's checkpoint file in the
// device-plugins directory.
const KubeletCheckpointName = "kubelet_internal_checkpoint"

// Allocation is one device of a watched resource as the kubelet's device
// checkpoint records it: the pod and container that hold it.
type Allocation struct {
	PodUID    string
	Container string
	// seen is the watcher's clock at the read that first found the device
	// held by this pod's container.
	seen uint64
}

// Checkpoint is what the kubelet's device checkpoint names, for the
// watched resources, at one read. It is not modified once read.
//
// The kubelet writes the file at Allocate and whenever a device plugin
// sends it a device list, from the allocations it holds in memory; it
// never deletes it. A pod the kubelet freed stays in the file until the
// next write.
type Checkpoint struct {
	known   bool
	devices map[string]Allocation // by deviceKey
	uids    map[string]bool
}

// unknownCheckpoint is the checkpoint of a read that failed: it proves
// nothing.
var unknownCheckpoint = &Checkpoint{}

// Known reports whether the file was read: a file that could not be read
// or parsed names nobody for certain, and may name anyone.
func (c *Checkpoint) Known() bool { return c.known }

// Holder returns the allocation of the pod's container that holds every
// one of ids of resource, if one does.
func (c *Checkpoint) Holder(resource string, ids []string) (Allocation, bool) {
	if len(ids) == 0 {
		return Allocation{}, false
	}
	first, ok := c.devices[deviceKey(resource, ids[0])]
	if !ok {
		return Allocation{}, false
	}
	for _, id := range ids[1:] {
		a, ok := c.devices[deviceKey(resource, id)]
		if !ok || a.PodUID != first.PodUID || a.Container != first.Container {
			return Allocation{}, false
		}
	}
	return first, true
}

// names reports whether the checkpoint names h: by its UID, or, where the
// UID was never known, by any of its devices.
func (c *Checkpoint) names(h Holder) bool {
	if h.UID != "" {
		return c.uids[h.UID]
	}
	for resource, ids := range h.Devices {
		for _, id := range ids {
			if _, ok := c.devices[deviceKey(resource, id)]; ok {
				return true
			}
		}
	}
	return false
}

// newest is the clock of the read that first found the most recent of
// the allocations.
func (c *Checkpoint) newest() uint64 {
	var n uint64
	for _, a := range c.devices {
		n = max(n, a.seen)
	}
	return n
}

// sameAs reports whether c and o name the same holders of the same
// devices.
func (c *Checkpoint) sameAs(o *Checkpoint) bool {
	return c.known == o.known && maps.EqualFunc(c.devices, o.devices, func(x, y Allocation) bool {
		return x.PodUID == y.PodUID && x.Container == y.Container
	})
}

func deviceKey(resource, id string) string { return resource + "\x00" + id }

// kubeletCheckpoint is the part of the device manager's checkpoint that
// the agent reads: which pod's container holds which device.
type kubeletCheckpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID        string
			ContainerName string
			ResourceName  string
			DeviceIDs     map[string][]string // by NUMA node
		}
	}
}

// readKubeletCheckpoint reads the checkpoint at path for resources. A
// file that does not exist names nobody: the kubelet writes it by rename
// and never deletes it.
func readKubeletCheckpoint(path string, resources []string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Checkpoint{known: true, devices: map[string]Allocation{}, uids: map[string]bool{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet checkpoint: %w", err)
	}
	return parseKubeletCheckpoint(b, resources)
}

func parseKubeletCheckpoint(b []byte, resources []string) (*Checkpoint, error) {
	var cp kubeletCheckpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("kubelet checkpoint: %w", err)
	}
	c := &Checkpoint{known: true, devices: map[string]Allocation{}, uids: map[string]bool{}}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == "" {
			return nil, errors.New("kubelet checkpoint: entry without pod UID")
		}
		if !slices.Contains(resources, e.ResourceName) {
			continue
		}
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				c.devices[deviceKey(e.ResourceName, id)] = Allocation{PodUID: e.PodUID, Container: e.ContainerName}
				c.uids[e.PodUID] = true
			}
		}
	}
	return c, nil
}

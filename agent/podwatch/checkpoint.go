package podwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
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

// checkpointReader reads the kubelet's device checkpoint and keeps the
// newest read, each allocation marked with the clock of the read that
// first found it.
type checkpointReader struct {
	path      string // "" for none: every read is unknown
	resources []string
	logger    *slog.Logger
	clock     *atomic.Uint64 // the watcher's; ticked after every read

	// mu makes reads one at a time, so that the kept one is the newest
	// and the ticks follow the order of the reads. It guards lastKnown
	// and failing, and the stores to last. The logger is the one call
	// made under it, so that the unreadable and readable-again lines come
	// in the order of the reads.
	mu        sync.Mutex
	lastKnown *Checkpoint // the last read that succeeded, for the seen marks
	failing   bool        // the last read failed; logged once per failure

	// last is the last read; loaded without mu by those that do not read.
	last atomic.Pointer[Checkpoint]
}

func newCheckpointReader(path string, resources []string, logger *slog.Logger, clock *atomic.Uint64) *checkpointReader {
	r := &checkpointReader{path: path, resources: resources, logger: logger, clock: clock}
	r.lastKnown = &Checkpoint{known: true}
	r.last.Store(unknownCheckpoint)
	return r
}

// latest returns the last read.
func (r *checkpointReader) latest() *Checkpoint { return r.last.Load() }

// read reads the checkpoint, keeps it as the latest, and reports whether
// it names other holders than the read before. A file that cannot be read
// or parsed gives an unknown checkpoint, which proves nothing.
func (r *checkpointReader) read() (ck *Checkpoint, changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.last.Load()
	ck = r.readFile()
	// Ticked after the read: a List with a higher seq began after it.
	tick := r.clock.Add(1)
	if ck.known {
		for key, a := range ck.devices {
			if old, ok := r.lastKnown.devices[key]; ok && old.PodUID == a.PodUID && old.Container == a.Container {
				a.seen = old.seen
			} else {
				a.seen = tick
			}
			ck.devices[key] = a
		}
		r.lastKnown = ck
	}
	r.last.Store(ck)
	return ck, !ck.sameAs(prev)
}

// readFile reads and parses the file, logging when it becomes unreadable
// and readable again. Called with mu held.
func (r *checkpointReader) readFile() *Checkpoint {
	if r.path == "" {
		return unknownCheckpoint
	}
	ck, err := readKubeletCheckpoint(r.path, r.resources)
	switch {
	case err == nil:
		if r.failing {
			r.logger.Info("kubelet checkpoint readable again")
		}
		r.failing = false
		return ck
	case !r.failing:
		r.logger.Warn("kubelet checkpoint unreadable; no pod is taken for gone until it is read", "err", err)
		r.failing = true
	}
	return unknownCheckpoint
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

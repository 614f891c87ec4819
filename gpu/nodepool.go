package gpu

import (
	"fmt"
)

// Assignment is what the node pool says about one node.
type Assignment struct {
	// Node is the node's name.
	Node string
	// MachineType is the node's machine type.
	MachineType MachineType
	// Mode is ModeReady, ModeMaintenance or ModeNotReady.
	Mode string
	// ResourceName is the extended resource the units are advertised as,
	// "<gpu.domain>/<machine type>", e.g. "hpe.com/compute-xlarge".
	ResourceName string
}

// Schedulable reports whether new pods may be given units: the mode is
// ready. In maintenance and not-ready the units are advertised unhealthy, so
// the kubelet allocates none of them; pods already running keep theirs
// (health changes never evict).
func (a Assignment) Schedulable() bool { return a.Mode == ModeReady }

// ForNode returns the node pool entry of node in the GPU section of the
// agent's configuration, with its machine type.
//
// A node that is not listed gets no machine type: the error wraps
// [ErrNotInNodePool] and says so, and the agent advertises no GPU resource.
// An entry whose machine type is not defined wraps [ErrInvalidMachineType];
// an unknown mode wraps [ErrInvalidMode] (config validation rejects both,
// but a hand-built configuration may not have been validated).
func ForNode(cfg Config, node string) (Assignment, error) {
	if node == "" {
		return Assignment{}, fmt.Errorf("%w: the node name is empty; no machine type is advertised", ErrNotInNodePool)
	}
	var entry *NodePoolEntry
	for i := range cfg.NodePool {
		if cfg.NodePool[i].Node == node {
			entry = &cfg.NodePool[i]
			break
		}
	}
	if entry == nil {
		return Assignment{}, fmt.Errorf("%w: node %q is not listed in gpu.nodePool (%d entries); no machine type is advertised",
			ErrNotInNodePool, node, len(cfg.NodePool))
	}
	if _, _, err := modeHealth(entry.Mode); err != nil || entry.Mode == "" {
		return Assignment{}, fmt.Errorf("gpu.nodePool entry of node %q: %w %q: want ready, maintenance or not-ready",
			node, ErrInvalidMode, entry.Mode)
	}
	for _, mt := range cfg.MachineTypes {
		if mt.Name != entry.MachineType {
			continue
		}
		if err := checkMachineType(mt); err != nil {
			return Assignment{}, fmt.Errorf("gpu.nodePool entry of node %q: %w", node, err)
		}
		domain := cfg.Domain
		if domain == "" {
			domain = DefaultDomain
		}
		return Assignment{Node: node, MachineType: mt, Mode: entry.Mode, ResourceName: domain + "/" + mt.Name}, nil
	}
	return Assignment{}, fmt.Errorf("gpu.nodePool entry of node %q: %w %q: not among gpu.machineTypes",
		node, ErrInvalidMachineType, entry.MachineType)
}

// CarveFor carves the node's units of its assigned machine type, their
// health following its mode: Carve(gpus, nics, a.MachineType,
// CarveOptions{Mode: a.Mode, ShareNICs: shareNICs}).
func CarveFor(a Assignment, gpus []GPU, nics []NIC, shareNICs bool) (*Carving, error) {
	return Carve(gpus, nics, a.MachineType, CarveOptions{Mode: a.Mode, ShareNICs: shareNICs})
}

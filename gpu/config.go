package gpu

// DefaultDomain prefixes machine-type resource names when the
// configuration names no domain.
const DefaultDomain = "hpe.com"

// Config configures GPU machine types, in the shape of the Imperator seed.
// The agent's configuration file carries it under "gpu" (agent/config).
type Config struct {
	// Domain prefixes the machine-type resource names. Default
	// [DefaultDomain].
	Domain string `json:"domain"`
	// MachineTypes offered by the cluster.
	MachineTypes []MachineType `json:"machineTypes,omitempty"`
	// NodePool assigns this cluster's nodes a machine type and a mode.
	NodePool []NodePoolEntry `json:"nodePool,omitempty"`
	// CDI names a unit's GPUs by the vendor's CDI devices
	// (nvidia.com/gpu=..., amd.com/gpu=...), which the NVIDIA or AMD
	// container toolkit's spec on the node must provide, instead of
	// mapping device nodes. Default false.
	CDI bool `json:"cdi,omitempty"`
	// SelectBy names GPUs to the runtime by "index" (default) or "uuid".
	SelectBy string `json:"selectBy,omitempty"`
	// ShareNICs lets units share a NUMA node's NICs when there are fewer
	// NICs than units need; by default such units are not offered.
	ShareNICs bool `json:"shareNICs,omitempty"`
}

// MachineType is a bundle of GPUs offered as one unit.
type MachineType struct {
	Name   string  `json:"name"`
	CPU    string  `json:"cpu,omitempty"`
	Memory string  `json:"memory,omitempty"`
	GPU    GPUSpec `json:"gpu"`
	// NICsPerUnit is how many of the nearest Slingshot NICs each unit gets.
	NICsPerUnit int `json:"nicsPerUnit"`
}

// GPUSpec selects the GPUs of a machine type.
type GPUSpec struct {
	// Type is the vendor: nvidia or amd.
	Type  string `json:"type"`
	Count int    `json:"count"`
	// Product matches the GPU's product name exactly; Family matches a
	// substring of it (e.g. "H100"). At most one of the two.
	Product string `json:"product,omitempty"`
	Family  string `json:"family,omitempty"`
}

// NodePoolEntry puts one node in a machine type and mode.
type NodePoolEntry struct {
	Node        string `json:"node"`
	Mode        string `json:"mode"`
	MachineType string `json:"machineType"`
}

// Node pool modes.
const (
	ModeReady       = "ready"
	ModeMaintenance = "maintenance"
	ModeNotReady    = "not-ready"
)

// NodeEntry returns the node pool entry of a node, if any.
func (g *Config) NodeEntry(node string) (NodePoolEntry, MachineType, bool) {
	for _, e := range g.NodePool {
		if e.Node != node {
			continue
		}
		for _, mt := range g.MachineTypes {
			if mt.Name == e.MachineType {
				return e, mt, true
			}
		}
	}
	return NodePoolEntry{}, MachineType{}, false
}

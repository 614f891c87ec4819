package gpu

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// The node pool of the Imperator design, in the agent's configuration.
const poolYAML = `
gpu:
  domain: example.org
  machineTypes:
  - name: compute-xlarge
    gpu: {type: nvidia, count: 2, family: H100}
    nicsPerUnit: 1
  - name: compute-medium
    gpu: {type: amd, count: 1, product: AMD Instinct MI250X}
    nicsPerUnit: 1
  nodePool:
  - {node: michiru, mode: ready, machineType: compute-xlarge}
  - {node: utaha, mode: maintenance, machineType: compute-xlarge}
  - {node: eriri, mode: not-ready, machineType: compute-medium}
`

// agentConfig is the part of the agent's configuration file that holds
// the GPU section (agent/config embeds Config there).
type agentConfig struct {
	GPU Config `json:"gpu"`
}

func parsePool(t *testing.T) agentConfig {
	t.Helper()
	var cfg agentConfig
	if err := yaml.UnmarshalStrict([]byte(poolYAML), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestForNodeAndModes(t *testing.T) {
	cfg := parsePool(t)
	nvidia := writeMock(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 4})
	amd := writeMock(t, mocksysfs.Spec{NICs: 2, NUMANodes: 2, GPUs: 2, GPUVendor: mocksysfs.AMD})
	for _, tc := range []struct {
		node        string
		tree        *mocksysfs.Truth
		machineType string
		schedulable bool
		units       int
	}{
		{"michiru", nvidia, "compute-xlarge", true, 2},
		{"utaha", nvidia, "compute-xlarge", false, 2},
		{"eriri", amd, "compute-medium", false, 2},
	} {
		t.Run(tc.node, func(t *testing.T) {
			a, err := ForNode(cfg.GPU, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if a.Node != tc.node || a.MachineType.Name != tc.machineType || a.ResourceName != "example.org/"+tc.machineType ||
				a.Schedulable() != tc.schedulable {
				t.Errorf("assignment %+v", a)
			}
			d, nics := discoverNode(t, tc.tree)
			c, err := CarveFor(a, d.GPUs, nics, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Units) != tc.units || c.Mode != a.Mode {
				t.Fatalf("%d units in mode %q, want %d in %q", len(c.Units), c.Mode, tc.units, a.Mode)
			}
			for _, u := range c.Units {
				if u.Healthy != tc.schedulable {
					t.Errorf("unit %s healthy=%v in mode %s", u.ID, u.Healthy, a.Mode)
				}
				if !u.Healthy && !strings.Contains(u.Reason, a.Mode) {
					t.Errorf("unit %s reason %q does not name the mode", u.ID, u.Reason)
				}
			}
		})
	}
}

func TestForNodeRefuses(t *testing.T) {
	cfg := parsePool(t)
	undefined := cfg.GPU
	undefined.NodePool = []NodePoolEntry{{Node: "n1", Mode: ModeReady, MachineType: "gone"}}
	badMode := cfg.GPU
	badMode.NodePool = []NodePoolEntry{{Node: "n1", Mode: "drained", MachineType: "compute-xlarge"}}
	badType := cfg.GPU
	badType.MachineTypes = []MachineType{{Name: "t", GPU: GPUSpec{Type: "nvidia", Count: 0}}}
	badType.NodePool = []NodePoolEntry{{Node: "n1", Mode: ModeReady, MachineType: "t"}}
	for name, tc := range map[string]struct {
		cfg      Config
		node     string
		want     error
		mentions string
	}{
		"unknown node":         {cfg.GPU, "sayaka", ErrNotInNodePool, `"sayaka" is not listed`},
		"empty node name":      {cfg.GPU, "", ErrNotInNodePool, "empty"},
		"no node pool":         {Config{Domain: DefaultDomain}, "michiru", ErrNotInNodePool, "0 entries"},
		"undefined type":       {undefined, "n1", ErrInvalidMachineType, `"gone"`},
		"bad mode":             {badMode, "n1", ErrInvalidMode, `"drained"`},
		"type that cannot run": {badType, "n1", ErrInvalidMachineType, "count 0"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := ForNode(tc.cfg, tc.node)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mentions) {
				t.Errorf("ForNode = %+v, %v; want %v mentioning %s", a, err, tc.want, tc.mentions)
			}
		})
	}
}

func TestForNodeDefaultDomain(t *testing.T) {
	g := Config{
		MachineTypes: []MachineType{machineType("nvidia", 1, 0)},
		NodePool:     []NodePoolEntry{{Node: "n", Mode: ModeMaintenance, MachineType: "compute-xlarge"}},
	}
	a, err := ForNode(g, "n")
	if err != nil || a.ResourceName != "hpe.com/compute-xlarge" || a.Schedulable() {
		t.Errorf("ForNode = %+v, %v", a, err)
	}
}

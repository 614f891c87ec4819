package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/slingshot-k8s/slingshot/gpu"
)

// ErrInvalid is matched by every validation error of [Parse].
var ErrInvalid = errors.New("invalid configuration")

// Config is the agent's configuration file. The zero value is not valid;
// start from [Default].
type Config struct {
	// NICResource is the device-plugin resource of the Slingshot NICs.
	NICResource NICResource `json:"nicResource"`
	// TrafficClasses the pods' services may use, by name:
	// DEDICATED_ACCESS, LOW_LATENCY, BULK_DATA, BEST_EFFORT. They become
	// SLINGSHOT_TCS. Default LOW_LATENCY and BEST_EFFORT, as Slurm.
	TrafficClasses []string `json:"trafficClasses"`
	// Limits are the per-service resource limits, by resource (ACs, CTs,
	// EQs, LEs, PTEs, TGQs, TLEs, TXQs). Omitted resources keep the
	// defaults, which reserve no TLE or LE pool.
	Limits map[string]Limit `json:"limits,omitempty"`
	// JobOptions is what a job may ask of its services beyond these
	// defaults (traffic classes, depth, reservations, extra VNIs).
	JobOptions JobOptions `json:"jobOptions"`
	// Membership says who may use a pod's services.
	Membership Membership `json:"membership"`
	// Cleanup governs destroying services when pods exit.
	Cleanup Cleanup `json:"cleanup"`
	// PodResources governs how pod exits are noticed.
	PodResources PodResources `json:"podResources"`
	// Health governs the NIC health checks.
	Health Health `json:"health"`
	// CDI governs the Container Device Interface specs the agent writes.
	CDI CDI `json:"cdi"`
	// GPU holds the machine types and this node pool's mode.
	GPU GPU `json:"gpu"`
	// AllowOpenDefaultService accepts a NIC whose default CXI service
	// (ID 1) is enabled and open to every process of the node: the agent
	// still reports it (log, slingshot_agent_default_service_open) but
	// stays ready. Default false: the agent is not ready while it is
	// open, since every pod holding a NIC may then use its VNIs.
	AllowOpenDefaultService bool `json:"allowOpenDefaultService,omitempty"`
}

// NICResource configures the NIC resource.
type NICResource struct {
	// Name is the extended resource name pods ask for. Default hpe.com/cxi.
	Name string `json:"name"`
	// SharesPerNIC is how many pods may hold one NIC at a time, each with
	// its own service. Default 1 (a NIC is exclusive to one container).
	SharesPerNIC int `json:"sharesPerNIC"`
	// HSNInterface puts an interface on the pod's NIC's hsn netdev into
	// the pod's network namespace, for TCP/IP on the high-speed network
	// without Multus. Off by default.
	HSNInterface HSNInterface `json:"hsnInterface"`
}

// HSNInterface configures the hsn interface the agent adds to the pods
// of a resource at PreStart and removes at pod exit: a macvlan or ipvlan
// child of the hsn netdev of the pod's NIC (matched by PCI address), with
// an address from the node's slices of Pool. A pod may name another pool,
// a subnet, a fixed address, the netdev or the interface name in its
// slingshot.hpe.com/network annotation.
type HSNInterface struct {
	Enabled bool `json:"enabled"`
	// Mode is "macvlan" (bridge mode, the default) or "ipvlan" (L2 mode,
	// one MAC address per port).
	Mode string `json:"mode"`
	// Name is the interface's name in the pod. Default hsn0.
	Name string `json:"name"`
	// Pool is the controller's IP pool the address comes from. Default
	// hsn0, the name --ip-pools gives in its example.
	Pool string `json:"pool"`
	// MTU of the interface; 0 keeps the parent's.
	MTU int `json:"mtu,omitempty"`
	// AllNICs gives a pod an interface on every NIC it holds (multi-rail),
	// named from Name up (hsn0, hsn1, ...) in the order of
	// SLINGSHOT_DEVICES; off, on its first NIC only.
	AllNICs bool `json:"allNICs,omitempty"`
	// PoolByNetdev names the pool of the interfaces on a netdev ("hsn1":
	// "hsn1"), where each rail has a network of its own; a netdev it does
	// not name takes Pool.
	PoolByNetdev map[string]string `json:"poolByNetdev,omitempty"`
}

// Limit is the max and reserved count of one CXI resource type.
type Limit struct {
	Max uint16 `json:"max"`
	Res uint16 `json:"res"`
}

// Membership chooses the members of a pod's services.
type Membership struct {
	// FallbackUID or FallbackGID, when set, is the member used where the
	// pod's network namespace cannot be found (no CRI socket). Unset, a
	// pod whose netns is unknown fails PreStart: services never get open
	// membership. 0 is refused: root's processes are the node's own.
	FallbackUID *uint32 `json:"fallbackUID,omitempty"`
	FallbackGID *uint32 `json:"fallbackGID,omitempty"`
	// CRISocket is the container runtime's socket, used to find a pod
	// sandbox's network namespace. Empty: look the sandbox up in /proc.
	CRISocket string `json:"criSocket,omitempty"`
}

// Cleanup configures service teardown.
type Cleanup struct {
	// BusyRetries bounds the EBUSY retries of one destroy attempt.
	BusyRetries int `json:"busyRetries"`
	// BusyInterval is the first delay between EBUSY retries; it doubles.
	BusyInterval Duration `json:"busyInterval"`
	// RetryStuckEvery is how often services still busy after their
	// retries are tried again. They are never forgotten.
	RetryStuckEvery Duration `json:"retryStuckEvery"`
	// DrainAfter is how long services of a gone pod (an unprepared claim)
	// may stay busy before the node is tainted
	// cxi.slingshot.hpe.com/cleanup-stuck:NoSchedule, so that new pods go
	// elsewhere; the taint goes when they are destroyed.
	DrainAfter Duration `json:"drainAfter"`
}

// PodResources configures the pod watch.
type PodResources struct {
	// PollInterval is how often the kubelet's PodResources API is listed:
	// a pod's exit is seen at the next List, and its services are
	// destroyed once the kubelet, nudged, has rewritten its device
	// checkpoint without it. Default 1s.
	PollInterval Duration `json:"pollInterval"`
}

// Health configures the NIC health checks.
type Health struct {
	// PollInterval is how often the sysfs attributes (link, retry handler,
	// operstate) are re-read; netlink link events trigger a re-read at
	// once in between. Default 10s.
	PollInterval Duration `json:"pollInterval"`
}

// CDI configures the Container Device Interface specs.
type CDI struct {
	// Enabled makes Allocate return CDI device names and PreStart write the
	// specs. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// SpecDir is where the specs are written. Default /var/run/cdi.
	SpecDir string `json:"specDir"`
}

// GPU configures GPU machine types; the types live in package gpu, which
// uses them, and are named here so that the file's shape reads in one place.
type (
	GPU           = gpu.Config
	MachineType   = gpu.MachineType
	GPUSpec       = gpu.GPUSpec
	NodePoolEntry = gpu.NodePoolEntry
)

// Node pool modes.
const (
	ModeReady       = gpu.ModeReady
	ModeMaintenance = gpu.ModeMaintenance
	ModeNotReady    = gpu.ModeNotReady
)

// Duration is a time.Duration written as "2s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON parses a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// Default returns the configuration used when no file is given.
func Default() Config {
	enabled := true
	return Config{
		NICResource: NICResource{Name: "hpe.com/cxi", SharesPerNIC: 1,
			HSNInterface: HSNInterface{Mode: "macvlan", Name: "hsn0", Pool: "hsn0"}},
		TrafficClasses: []string{"LOW_LATENCY", "BEST_EFFORT"},
		JobOptions:     DefaultJobOptions(),
		Cleanup: Cleanup{
			BusyRetries:     5,
			BusyInterval:    Duration{200 * time.Millisecond},
			RetryStuckEvery: Duration{30 * time.Second},
			DrainAfter:      Duration{5 * time.Minute},
		},
		PodResources: PodResources{PollInterval: Duration{time.Second}},
		Health:       Health{PollInterval: Duration{10 * time.Second}},
		CDI:          CDI{Enabled: &enabled, SpecDir: "/var/run/cdi"},
		GPU:          GPU{Domain: gpu.DefaultDomain},
	}
}

// Load reads and parses a configuration file; an empty path gives
// [Default].
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads YAML over [Default] and validates the result. Unknown
// fields are errors. Errors match [ErrInvalid].
func Parse(data []byte) (Config, error) {
	c := Default()
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// CDIEnabled reports whether CDI specs are used.
func (c *Config) CDIEnabled() bool { return c.CDI.Enabled == nil || *c.CDI.Enabled }

var (
	// resourceName is a Kubernetes extended resource name: a DNS subdomain
	// prefix and a name.
	resourceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	domain       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

	trafficClasses = map[string]bool{"DEDICATED_ACCESS": true, "LOW_LATENCY": true, "BULK_DATA": true, "BEST_EFFORT": true}
	limitNames     = map[string]bool{"ACs": true, "CTs": true, "EQs": true, "LEs": true, "PTEs": true, "TGQs": true, "TLEs": true, "TXQs": true}
)

// Validate checks every field and returns all problems at once, joined;
// each matches [ErrInvalid].
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if len(c.NICResource.Name) > 253 || !resourceName.MatchString(c.NICResource.Name) {
		bad("nicResource.name", "%q is not a resource name like hpe.com/cxi", c.NICResource.Name)
	}
	if c.NICResource.SharesPerNIC < 1 || c.NICResource.SharesPerNIC > 256 {
		bad("nicResource.sharesPerNIC", "%d is outside 1..256", c.NICResource.SharesPerNIC)
	}
	errs = append(errs, validateHSN(&c.NICResource.HSNInterface, "nicResource.hsnInterface")...)
	if len(c.TrafficClasses) == 0 {
		bad("trafficClasses", "at least one is needed")
	}
	for _, tc := range c.TrafficClasses {
		if !trafficClasses[tc] {
			bad("trafficClasses", "unknown class %q", tc)
		}
	}
	for name, l := range c.Limits {
		if !limitNames[name] {
			bad("limits", "unknown resource %q", name)
		} else if l.Res > l.Max {
			bad("limits."+name, "res %d exceeds max %d", l.Res, l.Max)
		}
	}
	errs = append(errs, validateJobOptions(&c.JobOptions)...)
	if c.Membership.FallbackUID != nil && c.Membership.FallbackGID != nil {
		bad("membership", "set fallbackUID or fallbackGID, not both")
	}
	// A CXI service member UID or GID admits every process of the node
	// with it, whatever pod it runs in; root's are the node's daemons.
	if u := c.Membership.FallbackUID; u != nil && *u == 0 {
		bad("membership.fallbackUID", "0 is root: every root process on the node would get every such pod's VNI; use a UID that only the pods run as")
	}
	if g := c.Membership.FallbackGID; g != nil && *g == 0 {
		bad("membership.fallbackGID", "0 is the root group: every process of the node in it would get every such pod's VNI; use a GID that only the pods run as")
	}
	if c.Cleanup.BusyRetries < 1 || c.Cleanup.BusyRetries > 100 {
		bad("cleanup.busyRetries", "%d is outside 1..100", c.Cleanup.BusyRetries)
	}
	if c.Cleanup.BusyInterval.Duration <= 0 || c.Cleanup.BusyInterval.Duration > time.Minute {
		bad("cleanup.busyInterval", "%v is outside (0, 1m]", c.Cleanup.BusyInterval.Duration)
	}
	if c.Cleanup.RetryStuckEvery.Duration < time.Second {
		bad("cleanup.retryStuckEvery", "%v is under 1s", c.Cleanup.RetryStuckEvery.Duration)
	}
	if c.Cleanup.DrainAfter.Duration < time.Second {
		bad("cleanup.drainAfter", "%v is under 1s", c.Cleanup.DrainAfter.Duration)
	}
	if c.PodResources.PollInterval.Duration < 10*time.Millisecond || c.PodResources.PollInterval.Duration > 10*time.Minute {
		bad("podResources.pollInterval", "%v is outside [10ms, 10m]", c.PodResources.PollInterval.Duration)
	}
	if c.Health.PollInterval.Duration < 10*time.Millisecond || c.Health.PollInterval.Duration > 10*time.Minute {
		bad("health.pollInterval", "%v is outside [10ms, 10m]", c.Health.PollInterval.Duration)
	}
	if c.CDIEnabled() && !strings.HasPrefix(c.CDI.SpecDir, "/") {
		bad("cdi.specDir", "%q is not an absolute path", c.CDI.SpecDir)
	}
	errs = append(errs, validateGPU(&c.GPU)...)
	return errors.Join(errs...)
}

var (
	ifName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)
	poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

func validateHSN(h *HSNInterface, field string) []error {
	var errs []error
	bad := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s.%s: %s", ErrInvalid, field, sub, fmt.Sprintf(format, args...)))
	}
	if h.Mode != "macvlan" && h.Mode != "ipvlan" {
		bad("mode", "%q is not macvlan or ipvlan", h.Mode)
	}
	if !ifName.MatchString(h.Name) {
		bad("name", "%q is not an interface name (1-15 letters, digits, '_', '.', '-')", h.Name)
	}
	if !poolName.MatchString(h.Pool) {
		bad("pool", "%q is not an ip pool name (a DNS label, as --ip-pools names pools)", h.Pool)
	}
	if h.MTU < 0 || h.MTU > 65535 {
		bad("mtu", "%d is outside 0..65535", h.MTU)
	}
	for _, dev := range slices.Sorted(maps.Keys(h.PoolByNetdev)) {
		if !ifName.MatchString(dev) {
			bad("poolByNetdev", "%q is not a netdev name", dev)
		}
		if p := h.PoolByNetdev[dev]; !poolName.MatchString(p) {
			bad("poolByNetdev."+dev, "%q is not an ip pool name (a DNS label, as --ip-pools names pools)", p)
		}
	}
	return errs
}

func validateGPU(g *GPU) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if !domain.MatchString(g.Domain) {
		bad("gpu.domain", "%q is not a DNS domain", g.Domain)
	}
	if g.SelectBy != "" && g.SelectBy != "index" && g.SelectBy != "uuid" {
		bad("gpu.selectBy", "%q is not index or uuid", g.SelectBy)
	}
	types := map[string]bool{}
	for i, mt := range g.MachineTypes {
		f := fmt.Sprintf("gpu.machineTypes[%d]", i)
		if !dnsLabel.MatchString(mt.Name) || len(mt.Name) > 63 {
			bad(f+".name", "%q is not a DNS label", mt.Name)
		}
		if types[mt.Name] {
			bad(f+".name", "%q is defined twice", mt.Name)
		}
		types[mt.Name] = true
		if mt.GPU.Type != "nvidia" && mt.GPU.Type != "amd" {
			bad(f+".gpu.type", "%q is not nvidia or amd", mt.GPU.Type)
		}
		if mt.GPU.Count < 1 || mt.GPU.Count > 64 {
			bad(f+".gpu.count", "%d is outside 1..64", mt.GPU.Count)
		}
		if mt.GPU.Product != "" && mt.GPU.Family != "" {
			bad(f+".gpu", "set product or family, not both")
		}
		if mt.NICsPerUnit < 0 || mt.NICsPerUnit > 16 {
			bad(f+".nicsPerUnit", "%d is outside 0..16", mt.NICsPerUnit)
		}
	}
	nodes := map[string]bool{}
	for i, e := range g.NodePool {
		f := fmt.Sprintf("gpu.nodePool[%d]", i)
		if e.Node == "" {
			bad(f+".node", "empty")
		}
		if nodes[e.Node] {
			bad(f+".node", "%q is listed twice; a node has one machine type", e.Node)
		}
		nodes[e.Node] = true
		switch e.Mode {
		case ModeReady, ModeMaintenance, ModeNotReady:
		default:
			bad(f+".mode", "%q is not ready, maintenance or not-ready", e.Mode)
		}
		if !types[e.MachineType] {
			bad(f+".machineType", "%q is not among machineTypes", e.MachineType)
		}
	}
	return errs
}

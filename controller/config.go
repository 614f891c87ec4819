package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// Config configures a Allocator. Zero fields take the defaults below.
type Config struct {
	// VNIRange is the range job VNIs come from; default 1024-65535.
	VNIRange vnialloc.Range
	// PodVNIRange is the sub-range of VNIRange carved into node slices for
	// pod-scoped VNIs; empty means pod-scoped VNIs come from VNIRange.
	PodVNIRange vnialloc.Range
	// PodVNISliceSize is the VNIs per node slice of PodVNIRange; default 64.
	PodVNISliceSize int
	// IPPools are IP ranges carved into node slices.
	IPPools []slices.PoolSpec
	// Quarantine is how long a freed VNI waits before reuse; default 60 s.
	// A negative value means none.
	Quarantine time.Duration
	// SliceTTL is how long a slice lease lasts without renewal; default
	// 60 s. Renewals are kept in memory, never stored, so the TTL costs the
	// store nothing; a new leader grants every slice a full TTL from its
	// takeover.
	SliceTTL time.Duration
	// SliceGrace is how long a node must be gone before its empty slices
	// are reclaimed, and before a deleted node stops holding VNIs;
	// default 5 min.
	SliceGrace time.Duration
	// SweepInterval is how often Run sweeps; default 10 s.
	SweepInterval time.Duration
	// SweepOwners bounds the owner look-ups of one sweep; default 256.
	SweepOwners int
	// HoldGrace is how long after a node's last acquire of a lease a
	// report of the VNIs it uses (ReportVNIsInUse) must still lack the
	// lease's VNI before the sweep drops the node's hold; default 2 min,
	// well past the kubelet's 30 s bound on the PreStart that acquires
	// and then records the lease. A negative value keeps every hold until
	// its release or the node's deletion.
	HoldGrace time.Duration
	// MaxLeasesPerNamespace caps the VNI leases the owners of one
	// namespace hold (jobs, claims and pods leased from VNIRange, those
	// draining included), so that one namespace cannot drain the range;
	// an acquire past it fails with an ExhaustedError. 0 means no cap.
	MaxLeasesPerNamespace int
	// Collectives, when set, reserves hardware collectives for each job
	// lease at the Slingshot fabric manager; nil (the default) disables
	// them.
	Collectives *CollectivesConfig

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the slingshot_controller_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Claims hears of each VNIClaim's lease, so that the claim's status
	// can show its VNI (package claimstatus); nil tells no one.
	Claims ClaimObserver
}

// DefaultVNIRange is the range Slurm and Flux use by default.
var DefaultVNIRange = vnialloc.Range{Min: 1024, Max: 65535}

func (c Config) withDefaults() Config {
	if c.VNIRange.Empty() {
		c.VNIRange = DefaultVNIRange
	}
	if c.PodVNISliceSize == 0 {
		c.PodVNISliceSize = 64
	}
	if c.Quarantine == 0 {
		c.Quarantine = 60 * time.Second
	}
	c.Quarantine = max(c.Quarantine, 0)
	if c.SliceTTL == 0 {
		c.SliceTTL = 60 * time.Second
	}
	if c.SliceGrace == 0 {
		c.SliceGrace = 5 * time.Minute
	}
	if c.HoldGrace == 0 {
		c.HoldGrace = 2 * time.Minute
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.SweepOwners == 0 {
		c.SweepOwners = 256
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// pools returns the configured pools, the pod VNI pool first.
func (c Config) pools() []slices.PoolSpec {
	var out []slices.PoolSpec
	if !c.PodVNIRange.Empty() {
		out = append(out, slices.PoolSpec{Name: slices.PodVNIPool, VNIs: c.PodVNIRange, SliceSize: c.PodVNISliceSize})
	}
	return append(out, c.IPPools...)
}

// Validate returns the configuration's errors joined, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := c.VNIRange.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("vni range: %w", err))
	}
	if err := c.PodVNIRange.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pod vni range: %w", err))
	}
	if !c.PodVNIRange.Empty() && (c.PodVNIRange.Min < c.VNIRange.Min || c.PodVNIRange.Max > c.VNIRange.Max) {
		errs = append(errs, fmt.Errorf("pod vni range %s must lie inside the vni range %s", c.PodVNIRange, c.VNIRange))
	}
	if !c.PodVNIRange.Empty() && c.PodVNIRange == c.VNIRange {
		errs = append(errs, fmt.Errorf("pod vni range %s leaves no vni for jobs", c.PodVNIRange))
	}
	names := map[string]bool{}
	for _, p := range c.pools() {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("pool %s configured twice", p.Name))
		}
		names[p.Name] = true
	}
	if c.SliceTTL < time.Second {
		errs = append(errs, fmt.Errorf("slice ttl %v below 1s", c.SliceTTL))
	}
	if c.SliceGrace < 0 || c.SweepInterval < 0 || c.SweepOwners < 0 {
		errs = append(errs, errors.New("negative slice grace, sweep interval or sweep owners"))
	}
	if c.MaxLeasesPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("negative leases per namespace cap %d", c.MaxLeasesPerNamespace))
	}
	if c.Collectives != nil {
		if err := c.Collectives.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

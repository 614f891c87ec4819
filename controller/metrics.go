package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	acquires    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	commitTime  prometheus.Histogram
	commitBatch prometheus.Histogram
	commitFails prometheus.Counter
	freed       prometheus.Counter
	unusedHolds prometheus.Counter
	stranded    prometheus.Gauge
	hwcoll      *prometheus.CounterVec
}

// Result is the label value for an outcome, as the metrics and the gRPC
// layer name it.
func Result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNamespaceFull):
		return "namespace_full"
	case errors.Is(err, ErrExhausted):
		return "exhausted"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrOwnerGone):
		return "owner_gone"
	default:
		return "error"
	}
}

func newMetrics(s *Allocator, reg prometheus.Registerer) *metrics {
	m := &metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_acquires_total",
			Help: "Acquire calls by kind (vni, owner, slice) and result.",
		}, []string{"kind", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_controller_acquire_duration_seconds",
			Help:    "Acquire latency inside the controller, durable commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"kind"}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slingshot_controller_commit_duration_seconds",
			Help:    "Time to commit one batch to the store.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slingshot_controller_commit_batch_ops",
			Help:    "Store ops per committed batch (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commitFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_controller_commit_failures_total",
			Help: "Failed store commits; each closes the gate and reloads.",
		}),
		freed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_controller_vnis_freed_total",
			Help: "VNI leases freed into quarantine.",
		}),
		unusedHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_controller_unused_holds_dropped_total",
			Help: "Node holds on VNI leases dropped because the node's reports stopped naming the VNI (a hold an agent crash left behind).",
		}),
		stranded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slingshot_controller_slices_stranded",
			Help: "Slices of gone nodes kept because the node last reported ids in use, or, while its Node object exists, the slice open (it may have handed out ids since).",
		}),
		hwcoll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_controller_hwcoll_calls_total",
			Help: "Hardware-collectives calls to the fabric manager by op (reserve, release, list) and result (ok, error), retries included; releases of orphans are op release too.",
		}, []string{"op", "result"}),
	}
	// Every op and result from the start, at 0, so that the alerts on
	// them see a fabric manager that never answered (no "ok" series yet)
	// and the series exist whether or not collectives are on.
	for _, op := range []string{hwcollReserve, hwcollRelease, hwcollList} {
		for _, result := range []string{"ok", "error"} {
			m.hwcoll.WithLabelValues(op, result)
		}
	}
	if reg == nil {
		return m
	}
	cs := []prometheus.Collector{m.acquires, m.latency, m.commitTime, m.commitBatch, m.commitFails, m.freed, m.unusedHolds, m.stranded, m.hwcoll}
	cs = append(cs, &namespaceFill{s: s, desc: prometheus.NewDesc("slingshot_controller_namespace_lease_fill_ratio",
		"Fraction of --max-leases-per-namespace that the leases of each owner namespace use (only namespaces holding leases, and only with a cap).",
		[]string{"owner_namespace"}, nil)})
	for _, c := range append(cs, stateGauges(s)...) {
		reg.MustRegister(c)
	}
	return m
}

// stateGauges read the allocator's state when scraped; all but the ready
// gauge read 0 while it is not loaded.
func stateGauges(s *Allocator) []prometheus.Collector {
	gauge := func(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	locked := func(f func() float64) func() float64 {
		return func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.ready {
				return 0
			}
			return f()
		}
	}
	cs := []prometheus.Collector{
		gauge("slingshot_controller_ready", "1 once the state is loaded and requests are answered.", nil,
			func() float64 {
				if s.Ready() {
					return 1
				}
				return 0
			}),
		gauge("slingshot_controller_leases", "VNI leases by state.", prometheus.Labels{"state": "leased"},
			locked(func() float64 { return float64(s.alloc.Leased()) })),
		gauge("slingshot_controller_leases", "VNI leases by state.", prometheus.Labels{"state": "quarantined"},
			locked(func() float64 { return float64(s.alloc.InQuarantine()) })),
		gauge("slingshot_controller_range_fill_ratio", "Fraction of a range leased or in quarantine.", prometheus.Labels{"range": "vni"},
			locked(func() float64 {
				return float64(s.alloc.Leased()+s.alloc.InQuarantine()) / float64(max(1, s.alloc.Capacity()))
			})),
	}
	for _, p := range s.cfg.pools() {
		name := p.Name
		cs = append(cs,
			gauge("slingshot_controller_range_fill_ratio", "Fraction of a range leased or in quarantine.", prometheus.Labels{"range": name},
				locked(func() float64 { return float64(s.pools[name].Leased()) / float64(max(1, p.Count())) })),
			gauge("slingshot_controller_slices_leased", "Node slices leased per pool.", prometheus.Labels{"pool": name},
				locked(func() float64 { return float64(s.pools[name].Leased()) })))
	}
	return cs
}

// namespaceFill exports, per namespace holding leases, how much of the
// namespace lease cap it uses, so that an alert can warn before acquires
// fail with namespace_full. The label is owner_namespace, not namespace:
// Prometheus adds its own namespace label (the controller's) to every
// series it scrapes from a pod.
type namespaceFill struct {
	s    *Allocator
	desc *prometheus.Desc
}

func (c *namespaceFill) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *namespaceFill) Collect(ch chan<- prometheus.Metric) {
	limit := c.s.cfg.MaxLeasesPerNamespace
	if limit <= 0 {
		return
	}
	c.s.mu.Lock()
	fill := make(map[string]float64, len(c.s.perNS))
	if c.s.ready {
		for ns, n := range c.s.perNS {
			fill[ns] = float64(n) / float64(limit)
		}
	}
	c.s.mu.Unlock()
	for ns, f := range fill {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, f, ns)
	}
}

func (m *metrics) observeAcquire(kind string, d time.Duration, err error) {
	m.acquires.WithLabelValues(kind, Result(err)).Inc()
	if err == nil {
		m.latency.WithLabelValues(kind).Observe(d.Seconds())
	}
}

func (m *metrics) observeCommit(ops int, d time.Duration, err error) {
	if err != nil {
		m.commitFails.Inc()
		return
	}
	m.commitTime.Observe(d.Seconds())
	m.commitBatch.Observe(float64(ops))
}

// The ops of slingshot_controller_hwcoll_calls_total.
const (
	hwcollReserve = "reserve"
	hwcollRelease = "release"
	hwcollList    = "list"
)

func (m *metrics) observeHWColl(op string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.hwcoll.WithLabelValues(op, result).Inc()
}

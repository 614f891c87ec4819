package ipam

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the allocator's series. The per-pool gauges are read from
// the allocator at scrape time, so they never disagree with it.
type metrics struct {
	latency     *prometheus.HistogramVec
	slowPath    *prometheus.CounterVec
	lostSlices  *prometheus.CounterVec
	stateErrors prometheus.Counter
	now         func() time.Time
}

var (
	addressesDesc = prometheus.NewDesc("slingshot_agent_ipam_addresses",
		"Addresses handed out, by IP pool.", []string{"pool"}, nil)
	freeDesc = prometheus.NewDesc("slingshot_agent_ipam_free_addresses",
		"Free addresses in the node's slices, by IP pool (slices being given back excluded).", []string{"pool"}, nil)
	slicesDesc = prometheus.NewDesc("slingshot_agent_ipam_slices",
		"Slices the node holds, by IP pool.", []string{"pool"}, nil)
	fillDesc = prometheus.NewDesc("slingshot_agent_ipam_slice_fill_ratio",
		"Share of a held slice's usable addresses in use, by IP pool and slice.", []string{"pool", "slice"}, nil)
)

func newMetrics(reg prometheus.Registerer, a *Allocator) *metrics {
	m := &metrics{
		now: a.opts.Now,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_ipam_duration_seconds",
			Help:    "Time to answer an address request (add) or release (del), by result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"op", "result"}),
		slowPath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_ipam_slow_path_total",
			Help: "Address requests that had to lease a slice from the controller first, by IP pool.",
		}, []string{"pool"}),
		lostSlices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_ipam_lost_slices_total",
			Help: "Slices the controller said the node no longer holds, by IP pool.",
		}, []string{"pool"}),
		stateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_agent_ipam_state_errors_total",
			Help: "Failed writes of the IPAM state file (the request failed with them).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.latency, m.slowPath, m.lostSlices, m.stateErrors, poolCollector{a})
	}
	return m
}

// seePool starts a pool's counters at 0 when the node learns of the
// pool, so that its first lost slice is an increase an alert's rate()
// sees rather than a new series.
func (m *metrics) seePool(name string) {
	m.lostSlices.WithLabelValues(name)
	m.slowPath.WithLabelValues(name)
}

// observe records one request's latency and result.
func (m *metrics) observe(op string, start time.Time, err error) {
	m.latency.WithLabelValues(op, resultOf(err)).Observe(m.now().Sub(start).Seconds())
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInvalidRequest):
		return "invalid"
	case errors.Is(err, ErrPoolFull):
		return "pool_full"
	case errors.Is(err, ErrAddressTaken):
		return "taken"
	default:
		return "unavailable"
	}
}

// poolCollector reads the per-pool gauges from the allocator.
type poolCollector struct{ a *Allocator }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- addressesDesc
	ch <- freeDesc
	ch <- slicesDesc
	ch <- fillDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.a.Inspect().Pools {
		ch <- prometheus.MustNewConstMetric(addressesDesc, prometheus.GaugeValue, float64(p.Addresses), p.Name)
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(p.Free), p.Name)
		ch <- prometheus.MustNewConstMetric(slicesDesc, prometheus.GaugeValue, float64(len(p.Slices)), p.Name)
		for _, s := range p.Slices {
			ch <- prometheus.MustNewConstMetric(fillDesc, prometheus.GaugeValue, s.Fill, p.Name, s.Prefix.String())
		}
	}
}

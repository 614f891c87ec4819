package dra

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the DRA path's Prometheus metrics; a nil *Metrics measures
// nothing.
type Metrics struct {
	duration     *prometheus.HistogramVec
	nriConnected prometheus.Gauge
	statusWrites *prometheus.CounterVec
}

// NewMetrics makes the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_dra_operation_seconds",
			Help:    "Duration of the DRA path's operations: prepare and unprepare (kubelet calls, per claim), bind (NRI RunPodSandbox, per pod).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op", "result"}),
		nriConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slingshot_agent_nri_connected",
			Help: "1 while the agent is connected to the container runtime's NRI socket (DRA mode); while 0 no claim's services can be bound, the agent is not ready and Prepare is refused.",
		}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_dra_claim_status_writes_total",
			Help: "Writes of prepared claims' status.devices (NIC, service IDs, VNIs, traffic classes), by result; a failed one fails nothing (the status is informational) and is retried a few times.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.nriConnected, m.statusWrites} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"ok", "error"} {
		m.statusWrites.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) observe(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.duration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}

func (m *Metrics) setNRIConnected(up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.nriConnected.Set(v)
}

func (m *Metrics) statusWrite(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.statusWrites.WithLabelValues(result).Inc()
}

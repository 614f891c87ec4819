package health

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the monitor's Prometheus series; a nil *metrics records
// nothing, for a monitor without a Registerer.
type metrics struct {
	reg      prometheus.Registerer
	healthy  *prometheus.GaugeVec
	linkUp   *prometheus.GaugeVec
	hwErrors *prometheus.CounterVec
}

// registerMetrics registers the monitor's series on reg; it returns nil
// metrics and no error for a nil reg.
func registerMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		reg: reg,
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_nic_healthy",
			Help: "Whether the NIC passes the health rule (link up, retry handler running, netdev up, no hardware-error burst).",
		}, []string{"nic"}),
		linkUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_nic_link_up",
			Help: "Whether the NIC's properties/link reads 1.",
		}, []string{"nic"}),
		hwErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_nic_hw_errors_total",
			Help: "Hardware errors the cxi driver reported on its cxierr netlink family.",
		}, []string{"nic"}),
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{m.healthy, m.linkUp, m.hwErrors} {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("register health metrics: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m == nil {
		return
	}
	m.reg.Unregister(m.healthy)
	m.reg.Unregister(m.linkUp)
	m.reg.Unregister(m.hwErrors)
}

func (m *metrics) set(nic string, s Status) {
	if m == nil {
		return
	}
	m.healthy.WithLabelValues(nic).Set(b2f(s.Healthy))
	m.linkUp.WithLabelValues(nic).Set(b2f(s.LinkUp))
}

func (m *metrics) hwError(nic string) {
	if m == nil {
		return
	}
	m.hwErrors.WithLabelValues(nic).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

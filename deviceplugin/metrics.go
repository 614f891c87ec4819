package deviceplugin

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of the metrics.
const (
	resultSuccess = "success"
	resultFailure = "failure"

	healthHealthy   = "healthy"
	healthUnhealthy = "unhealthy"

	reasonKubeletRestart = "kubelet_restart"
	reasonSocketRemoved  = "socket_removed"
	reasonStreamEnded    = "stream_ended"
	reasonServeFailed    = "serve_failed"
)

// metrics are the collectors shared by every Server on one Registerer.
type metrics struct {
	registrations   *prometheus.CounterVec
	reregistrations *prometheus.CounterVec
	allocations     *prometheus.CounterVec
	allocateSeconds *prometheus.HistogramVec
	preStartSeconds *prometheus.HistogramVec
	healthChanges   *prometheus.CounterVec
	devices         *prometheus.GaugeVec
	streams         *prometheus.GaugeVec
}

// newMetrics registers the collectors on reg, or reuses the ones another
// Server registered there before. A nil reg keeps them unregistered.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_deviceplugin_registrations_total",
			Help: "Register calls to the kubelet, by resource and result (success or failure).",
		}, []string{"resource", "result"}),
		reregistrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_deviceplugin_reregistrations_total",
			Help: "Times a device plugin had to serve or register again, by resource and reason (kubelet_restart, socket_removed, stream_ended, serve_failed).",
		}, []string{"resource", "reason"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_deviceplugin_allocations_total",
			Help: "Container allocations answered, by resource and result (success or failure).",
		}, []string{"resource", "result"}),
		allocateSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_deviceplugin_allocate_duration_seconds",
			Help:    "Time to answer one Allocate call of the kubelet, by resource.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16), // 25µs .. ~0.8s
		}, []string{"resource"}),
		preStartSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_deviceplugin_prestart_duration_seconds",
			Help:    "Time to answer one PreStartContainer call of the kubelet, by resource.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 14), // 100µs .. ~15s
		}, []string{"resource"}),
		healthChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_deviceplugin_health_changes_total",
			Help: "Device health transitions, by resource and the new health (healthy or unhealthy).",
		}, []string{"resource", "health"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_deviceplugin_devices",
			Help: "Devices advertised to the kubelet, by resource and health (healthy or unhealthy).",
		}, []string{"resource", "health"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_deviceplugin_listandwatch_streams",
			Help: "Open ListAndWatch streams from the kubelet, by resource; 0 while registered means the kubelet is not watching.",
		}, []string{"resource"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.registrations = register(reg, m.registrations, &err)
	m.reregistrations = register(reg, m.reregistrations, &err)
	m.allocations = register(reg, m.allocations, &err)
	m.allocateSeconds = register(reg, m.allocateSeconds, &err)
	m.preStartSeconds = register(reg, m.preStartSeconds, &err)
	m.healthChanges = register(reg, m.healthChanges, &err)
	m.devices = register(reg, m.devices, &err)
	m.streams = register(reg, m.streams, &err)
	return m, err
}

// register registers c on reg and returns it, or returns the collector of
// the same description that is already registered there. Any other error
// is joined into *errp.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = errors.Join(*errp, err)
	return c
}

package agent

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/devplugin"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
)

// metrics are the agent's own series; the device-plugin servers, the
// health monitor and the config watcher register theirs on the same
// registry.
type metrics struct {
	preStart         *prometheus.HistogramVec
	cleanupLatency   prometheus.Histogram
	serviceErrors    *prometheus.CounterVec
	busyRetries      *prometheus.CounterVec
	stuckServices    prometheus.Counter
	checkpointErrors prometheus.Counter
	controllerCalls  *prometheus.HistogramVec
	ready            prometheus.Gauge
	nicSpeed         *prometheus.GaugeVec
	podLists         *prometheus.CounterVec
	podListLatency   prometheus.Histogram
	kubeletNudges    *prometheus.CounterVec
	// defaultServiceOpen is 1 for a NIC whose default CXI service is
	// open to every process of the node (see defaultServiceGuard).
	defaultServiceOpen *prometheus.GaugeVec
	// hsnErrors counts the failed steps of pods' hsn interfaces.
	hsnErrors *prometheus.CounterVec
	// eventsDropped counts the events the limits refused (event.Limited).
	eventsDropped *prometheus.CounterVec
	// cleanupStuck is the number of services busy past drainAfter.
	cleanupStuck prometheus.Gauge
	// nicReserved and nicFree are each NIC's reservations, by resource
	// and pool (reservations.go).
	nicReserved, nicFree *prometheus.GaugeVec
	// cdiVisible is how long a written CDI spec took to show in a cache
	// refreshing as the runtime's does (cdispec.WaitVisible).
	cdiVisible *prometheus.HistogramVec
	now        func() time.Time
}

// engine is the part of the metrics the bind engine counts, in both front
// ends.
func (m *metrics) engine() engine.Metrics {
	return engine.Metrics{ServiceErrors: m.serviceErrors, Stuck: m.stuckServices, Teardown: m.cleanupLatency, HSNErrors: m.hsnErrors}
}

// plugin is the part of the metrics the device-plugin front end counts;
// they are registered in both modes.
func (m *metrics) plugin() devplugin.Metrics {
	return devplugin.Metrics{PreStart: m.preStart, Nudges: m.kubeletNudges,
		PodLists: m.podLists, ListLatency: m.podListLatency}
}

// fastBuckets span 100 µs to ~3 s: PreStart and controller calls.
var fastBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

func newMetrics(now func() time.Time) *metrics {
	m := &metrics{
		now: now,
		preStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_prestart_duration_seconds",
			Help:    "Time to bind a container at PreStartContainer (find pod, lease VNI, create services, publish), by result.",
			Buckets: fastBuckets,
		}, []string{"result"}),
		cleanupLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slingshot_agent_cleanup_duration_seconds",
			Help:    "Time from a pod seen gone, or a claim's unprepare, to its services destroyed and its VNI released.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		serviceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_service_errors_total",
			Help: "CXI service operations that failed, by NIC and operation.",
		}, []string{"nic", "op"}),
		busyRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_service_busy_total",
			Help: "SVC_DESTROY calls answered EBUSY (the service still had users), by NIC; each is retried.",
		}, []string{"nic"}),
		stuckServices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_agent_stuck_services_total",
			Help: "Services still busy after a whole round of destroy retries; they are kept and retried later.",
		}),
		checkpointErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slingshot_agent_checkpoint_errors_total",
			Help: "Failed writes of the agent's checkpoint.",
		}),
		controllerCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_controller_request_duration_seconds",
			Help:    "Calls to the cluster controller, by operation and result.",
			Buckets: fastBuckets,
		}, []string{"op", "result"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slingshot_agent_ready",
			Help: "1 once the start-up reconcile is done and the device plugins serve.",
		}),
		nicSpeed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_nic_speed_mbps",
			Help: "Link speed of each NIC in Mb/s, as the driver reports it.",
		}, []string{"nic"}),
		podLists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_podresources_lists_total",
			Help: "List calls to the kubelet's PodResources API, retries included, by result (ok, rate_limited: refused with ResourceExhausted, error).",
		}, []string{"result"}),
		podListLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "slingshot_agent_podresources_list_duration_seconds",
			Help:    "Time of the successful List calls to the kubelet's PodResources API.",
			Buckets: fastBuckets,
		}),
		kubeletNudges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_kubelet_nudges_total",
			Help: "Device lists sent to the kubelet again, by resource, to make it rewrite its device checkpoint when that lags PodResources.",
		}, []string{"resource"}),
		defaultServiceOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_default_service_open",
			Help: "1 while the NIC's default CXI service (ID 1) is enabled and open to every process of the node (or to root), which lets pods of different jobs share its VNIs; 0 while it is disabled or restricted.",
		}, []string{"nic"}),
		nicReserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_nic_reserved",
			Help: "What the CXI services of a NIC reserve of a resource (PTEs, TXQs, TGQs, EQs, CTs, LEs, TLEs, ACs) or pool (LE pools, counting the shared pool 0; TLE pools, counting the default service's), system services included; read every health poll.",
		}, []string{"nic", "resource"}),
		nicFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slingshot_agent_nic_free",
			Help: "What no CXI service of a NIC reserves of a resource or pool: what a new service may still reserve; read every health poll.",
		}, []string{"nic", "resource"}),
		hsnErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_hsn_interface_errors_total",
			Help: "Failed steps of the pods' hsn interfaces, by op: allocate (the address), attach, detach, release (the address).",
		}, []string{"op"}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_events_dropped_total",
			Help: "Kubernetes events not written because their object's or the agent's rate limit was reached, by reason (the log has each failure).",
		}, []string{"reason"}),
		cdiVisible: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slingshot_agent_cdi_visible_seconds",
			Help:    "Time from writing a container's CDI spec at PreStartContainer until a CDI cache refreshing as the container runtime's does holds it, by result (visible, or timeout: the runtime may not resolve it yet, and the kubelet retries the container).",
			Buckets: fastBuckets,
		}, []string{"result"}),
		cleanupStuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slingshot_agent_cleanup_stuck_services",
			Help: "Services of gone pods (or unprepared claims) still undestroyed past cleanup.drainAfter; while above 0 the node carries the cxi.slingshot.hpe.com/cleanup-stuck:NoSchedule taint.",
		}),
	}
	for _, op := range []string{"allocate", "attach", "detach", "release"} {
		m.hsnErrors.WithLabelValues(op)
	}
	for _, r := range []string{"visible", "timeout"} {
		m.cdiVisible.WithLabelValues(r)
	}
	for _, r := range []podwatch.ListResult{podwatch.ListOK, podwatch.ListRateLimited, podwatch.ListError} {
		m.podLists.WithLabelValues(string(r))
	}
	// The pod path's results start at 0, so that the first error is an
	// increase rate() sees and the dashboard's latency panels have series
	// before the first pod.
	for _, r := range []string{"ok", "error"} {
		m.preStart.WithLabelValues(r)
		for _, op := range []string{"acquire", "release"} {
			m.controllerCalls.WithLabelValues(op, r)
		}
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.preStart, m.cleanupLatency, m.serviceErrors, m.busyRetries,
		m.stuckServices, m.checkpointErrors, m.controllerCalls, m.ready, m.nicSpeed, m.podLists, m.podListLatency,
		m.kubeletNudges, m.defaultServiceOpen, m.hsnErrors, m.eventsDropped, m.cleanupStuck, m.nicReserved, m.nicFree, m.cdiVisible} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// observeCDIVisible records a cdispec.WaitVisible wait.
func (m *metrics) observeCDIVisible(took time.Duration, visible bool) {
	r := "visible"
	if !visible {
		r = "timeout"
	}
	m.cdiVisible.WithLabelValues(r).Observe(took.Seconds())
}

// stateCollector exports gauges computed from the agent's state when
// scraped: services per NIC, and holders (pods, or claims in DRA mode)
// by state.
type stateCollector struct {
	eng      *engine.Engine
	nics     nicSet
	services *prometheus.Desc
	pods     *prometheus.Desc
}

func newStateCollector(eng *engine.Engine, nics nicSet) *stateCollector {
	return &stateCollector{
		eng:      eng,
		nics:     nics,
		services: prometheus.NewDesc("slingshot_agent_services", "CXI services the agent holds for pods or claims, by NIC.", []string{"nic"}, nil),
		pods:     prometheus.NewDesc("slingshot_agent_pods", "Pods (device plugin) or claims (DRA) the agent serves, by state (running, cleanup).", []string{"state"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.services
	ch <- c.pods
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	perNIC := map[string]int{}
	for name := range c.nics {
		perNIC[name] = 0
	}
	running, cleaning := 0, 0
	for _, p := range c.eng.All() {
		if p.Exited != nil {
			cleaning++
		} else {
			running++
		}
		for _, s := range p.Services {
			perNIC[s.NIC]++
		}
	}
	for nic, n := range perNIC {
		ch <- prometheus.MustNewConstMetric(c.services, prometheus.GaugeValue, float64(n), nic)
	}
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(running), "running")
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(cleaning), "cleanup")
}

// Package dashboard builds the Grafana dashboard of the Slingshot agent and
// controller that the chart ships (grafanaDashboard.enabled) with Grafana's
// foundation SDK, so that panels are Go values, not hand-edited JSON.
// `go run .` in hack/monitoring writes it to the chart; the module's tests
// fail when the committed file differs from a fresh build.
package dashboard

//lint:file-ignore SA1019 the SDK prefers its v2 dashboard schema, which only Grafana 12 with its dynamic dashboards reads; the classic model here is what the dashboard sidecar provisions into every Grafana in use.

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's stable identifier, so links to it survive
// re-imports.
const UID = "slingshot-overview"

// query is one PromQL target of a panel. $node, $__rate_interval and
// $datasource are the dashboard's variables and Grafana's.
type query struct {
	expr, legend string
}

// panel is one panel of a row: a stat for a current value, a time series
// otherwise.
type panel struct {
	title, description string
	stat               bool
	unit               string
	queries            []query
}

type row struct {
	title  string
	panels []panel
}

// rate interval of every rate() in the panels: Grafana's, which is at
// least four scrape intervals.
const ri = "[$__rate_interval]"

// nodeSel selects the agents of the nodes chosen in the $node variable.
const nodeSel = `node=~"$node"`

func p99(metric, by, sel string) string {
	return fmt.Sprintf(`histogram_quantile(0.99, sum by (%sle) (rate(%s_bucket{%s}%s)))`, by, metric, sel, ri)
}

var rows = []row{
	{"Agents", []panel{
		{title: "Agents ready", description: "Agents that finished their start-up reconcile, of all agents scraped.", stat: true, unit: "none", queries: []query{
			{`sum(slingshot_agent_ready{` + nodeSel + `})`, "ready"},
			{`count(slingshot_agent_ready{` + nodeSel + `})`, "agents"},
		}},
		{title: "Agents not ready", description: "Nodes whose agent is not ready: no new pod there gets a Slingshot NIC.", stat: true, unit: "none", queries: []query{
			{`count(slingshot_agent_ready{` + nodeSel + `} == 0) or vector(0)`, "not ready"},
		}},
		{title: "NRI disconnected (DRA)", description: "Agents of --api=dra without the runtime's NRI socket: they refuse Prepare.", stat: true, unit: "none", queries: []query{
			{`count(slingshot_agent_nri_connected{` + nodeSel + `} == 0) or vector(0)`, "disconnected"},
		}},
		{title: "Open default CXI services", description: "NICs whose default service (ID 1) is open to every process: jobs are not isolated.", stat: true, unit: "none", queries: []query{
			{`count(slingshot_agent_default_service_open{` + nodeSel + `} == 1) or vector(0)`, "open"},
		}},
		{title: "NICs unhealthy or link down", description: "NICs the agent reports unhealthy, or whose link is down.", stat: true, unit: "none", queries: []query{
			{`count(slingshot_agent_nic_healthy{` + nodeSel + `} == 0) or vector(0)`, "unhealthy"},
			{`count(slingshot_agent_nic_link_up{` + nodeSel + `} == 0) or vector(0)`, "link down"},
		}},
	}},
	{"Pod path", []panel{
		{title: "CXI services held", description: "Services the agents hold for pods, by node.", unit: "none", queries: []query{
			{`sum by (node) (slingshot_agent_services{` + nodeSel + `})`, "{{node}}"},
		}},
		{title: "Pods served", description: "Pods the agents serve, running or in cleanup.", unit: "none", queries: []query{
			{`sum by (state) (slingshot_agent_pods{` + nodeSel + `})`, "{{state}}"},
		}},
		{title: "PreStart p99", description: "Time to bind a container at PreStartContainer (device-plugin API), by result.", unit: "s", queries: []query{
			{p99("slingshot_agent_prestart_duration_seconds", "result, ", nodeSel), "{{result}}"},
		}},
		{title: "CDI spec visible p99", description: "PreStartContainer's wait until its CDI spec is in a cache refreshing as the runtime's (device-plugin API); timeout: given up after 1 s.", unit: "s", queries: []query{
			{p99("slingshot_agent_cdi_visible_seconds", "result, ", nodeSel), "{{result}}"},
		}},
		{title: "DRA operations p99", description: "Prepare, unprepare (per claim) and bind (per pod sandbox) of --api=dra.", unit: "s", queries: []query{
			{p99("slingshot_agent_dra_operation_seconds", "op, ", nodeSel), "{{op}}"},
		}},
		{title: "Cleanup p50 and p99", description: "Pod exit seen to services destroyed and VNI released.", unit: "s", queries: []query{
			{`histogram_quantile(0.5, sum by (le) (rate(slingshot_agent_cleanup_duration_seconds_bucket{` + nodeSel + `}` + ri + `)))`, "p50"},
			{p99("slingshot_agent_cleanup_duration_seconds", "", nodeSel), "p99"},
		}},
		{title: "Service failures", description: "Failed CXI service operations per second (both APIs), EBUSY retries on destroy, and services stuck after a round of retries.", unit: "ops", queries: []query{
			{`sum by (op) (rate(slingshot_agent_service_errors_total{` + nodeSel + `}` + ri + `))`, "error {{op}}"},
			{`sum(rate(slingshot_agent_service_busy_total{` + nodeSel + `}` + ri + `))`, "busy (retried)"},
			{`sum(rate(slingshot_agent_stuck_services_total{` + nodeSel + `}` + ri + `))`, "stuck"},
		}},
		{title: "Write errors", description: "Failed writes of the agent's checkpoint and of its IPAM state: a restarted agent may not know what it made.", unit: "ops", queries: []query{
			{`sum by (node) (rate(slingshot_agent_checkpoint_errors_total{` + nodeSel + `}` + ri + `))`, "checkpoint {{node}}"},
			{`sum by (node) (rate(slingshot_agent_ipam_state_errors_total{` + nodeSel + `}` + ri + `))`, "ipam state {{node}}"},
		}},
		{title: "Controller calls p99", description: "The agents' calls to the controller on the pod path, by operation.", unit: "s", queries: []query{
			{p99("slingshot_agent_controller_request_duration_seconds", "op, ", nodeSel), "{{op}}"},
		}},
	}},
	{"IP addresses", []panel{
		{title: "Free addresses", description: "Free addresses in the nodes' slices, by pool.", unit: "none", queries: []query{
			{`sum by (pool) (slingshot_agent_ipam_free_addresses{` + nodeSel + `})`, "{{pool}}"},
		}},
		{title: "Slices lost", description: "Slices the controller said a node no longer holds (expired leases): addresses may collide.", unit: "none", queries: []query{
			{`sum by (node, pool) (increase(slingshot_agent_ipam_lost_slices_total{` + nodeSel + `}` + ri + `))`, "{{node}} {{pool}}"},
		}},
	}},
	{"Controller", []panel{
		{title: "Leader and ready", description: "Replicas that lead (with --leader-elect) and that have their state loaded.", stat: true, unit: "none", queries: []query{
			{`sum(slingshot_controller_leader)`, "leaders"},
			{`sum(slingshot_controller_ready)`, "ready"},
		}},
		{title: "Range fill", description: "Share of each range leased or in quarantine: vni is the job VNI range, the others IP pools.", unit: "percentunit", queries: []query{
			{`max by (range) (slingshot_controller_range_fill_ratio)`, "{{range}}"},
		}},
		{title: "Fullest namespaces", description: "Share of the namespace lease cap (--max-leases-per-namespace) the ten fullest namespaces use.", unit: "percentunit", queries: []query{
			{`topk(10, max by (owner_namespace) (slingshot_controller_namespace_lease_fill_ratio))`, "{{owner_namespace}}"},
		}},
		{title: "Leases", description: "VNI leases held and in quarantine.", unit: "none", queries: []query{
			{`max by (state) (slingshot_controller_leases)`, "{{state}}"},
		}},
		{title: "Acquires", description: "Acquires per second by kind and result (namespace_full: past the namespace cap; exhausted: the range is full).", unit: "ops", queries: []query{
			{`sum by (kind, result) (rate(slingshot_controller_acquires_total` + ri + `))`, "{{kind}} {{result}}"},
		}},
		{title: "Acquire p99", description: "Acquire latency inside the controller, durable commit included.", unit: "s", queries: []query{
			{p99("slingshot_controller_acquire_duration_seconds", "kind, ", ""), "{{kind}}"},
		}},
		{title: "Agents' API p99", description: "gRPC latency of the agents' calls, by method.", unit: "s", queries: []query{
			{p99("slingshot_controller_grpc_request_duration_seconds", "method, ", ""), "{{method}}"},
		}},
		{title: "Hook refusals", description: "Metacontroller hook requests not acted on because the API server contradicts their body.", unit: "ops", queries: []query{
			{`sum by (hook, reason) (rate(slingshot_controller_hook_refused_total` + ri + `))`, "{{hook}} {{reason}}"},
		}},
		{title: "Store commit failures and limits", description: "Failed store commits (each reloads the state) and gRPC calls refused by the limits.", unit: "ops", queries: []query{
			{`sum(rate(slingshot_controller_commit_failures_total` + ri + `))`, "commit failures"},
			{`sum by (reason) (rate(slingshot_controller_grpc_limited_total` + ri + `))`, "limited {{reason}}"},
		}},
		{title: "Fabric manager", description: "Hardware-collectives calls to the fabric manager per second, by op and result, retries included (flat at 0 with collectives off).", unit: "ops", queries: []query{
			{`sum by (op, result) (rate(slingshot_controller_hwcoll_calls_total` + ri + `))`, "{{op}} {{result}}"},
		}},
	}},
}

// datasource is the Prometheus data source chosen in the dashboard's
// $datasource variable.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func targets(qs []query) []cog.Builder[variants.Dataquery] {
	var out []cog.Builder[variants.Dataquery]
	for i, q := range qs {
		out = append(out, prometheus.NewDataqueryBuilder().Expr(q.expr).LegendFormat(q.legend).RefId(string(rune('A'+i))).Datasource(datasource))
	}
	return out
}

// New builds the dashboard.
func New() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("Slingshot").
		Uid(UID).
		Description("The Slingshot agents (per node) and controller: readiness, the pod path, IP slices, VNI ranges and the hooks. Alerts: the chart's PrometheusRule.").
		Tags([]string{"slingshot", "hpe"}).
		Refresh("1m").
		Time("now-6h", "now").
		Timezone("browser").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("node").Label("Node").
			Datasource(datasource).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(slingshot_agent_ready, node)")}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).IncludeAll(true).AllValue(".*"))
	// Panel ids must be unique within a dashboard: Grafana keys links,
	// edits and "view panel" by them.
	var id uint32
	for _, r := range rows {
		id++
		b = b.WithRow(dashboard.NewRowBuilder(r.title).Id(id))
		for _, p := range r.panels {
			id++
			if p.stat {
				sp := stat.NewPanelBuilder().Title(p.title).Description(p.description).Unit(p.unit).
					Datasource(datasource).Height(4).Span(24 / uint32(len(r.panels))).Id(id)
				for _, t := range targets(p.queries) {
					sp = sp.WithTarget(t)
				}
				b = b.WithPanel(sp)
				continue
			}
			tp := timeseries.NewPanelBuilder().Title(p.title).Description(p.description).Unit(p.unit).
				Datasource(datasource).Height(8).Span(12).Id(id)
			for _, t := range targets(p.queries) {
				tp = tp.WithTarget(t)
			}
			b = b.WithPanel(tp)
		}
	}
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build dashboard: %w", err)
	}
	return d, nil
}

// JSON is the dashboard as Grafana imports it, indented, with a final
// newline.
func JSON() ([]byte, error) {
	d, err := New()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode dashboard: %w", err)
	}
	return append(out, '\n'), nil
}

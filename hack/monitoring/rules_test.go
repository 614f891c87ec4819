package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

const root = "../.."

// Every rule loads as Prometheus loads a rule file (YAML, PromQL, the
// annotations' templates) and carries what the on-call person needs: a
// severity Alertmanager can route on, a summary and a description.
func TestRulesLoadAndAreDocumented(t *testing.T) {
	rgs, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if len(strings.TrimSpace(r.Annotations[a])) < 20 {
					t.Errorf("%s: annotation %s %q is missing or too short to help", r.Alert, a, r.Annotations[a])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts")
	}
}

// alertCase is one evaluation of the chart's rules over loaded series.
type alertCase struct {
	name   string
	alert  string
	series string        // promqltest series lines, one sample a minute from 0
	at     time.Duration // when the alert is looked at
	// want are the firing alerts' labels, less alertname and the rule's
	// own labels; empty: the alert must not fire.
	want []map[string]string
}

var alertCases = []alertCase{
	{name: "an agent not ready for 12 minutes", alert: "SlingshotAgentNotReady", at: 12 * time.Minute,
		series: `slingshot_agent_ready{node="n1",instance="10.0.0.1:9479"} 0x15
			slingshot_agent_ready{node="n2",instance="10.0.0.2:9479"} 1x15`,
		want: []map[string]string{{"node": "n1", "instance": "10.0.0.1:9479"}}},
	{name: "an agent not ready for 5 minutes at start", alert: "SlingshotAgentNotReady", at: 12 * time.Minute,
		series: `slingshot_agent_ready{node="n1",instance="10.0.0.1:9479"} 0x5 1x10`},

	{name: "NRI lost for 8 minutes", alert: "SlingshotAgentNRIDisconnected", at: 10 * time.Minute,
		series: `slingshot_agent_nri_connected{node="n1"} 1 1 0x13`,
		want:   []map[string]string{{"node": "n1"}}},
	{name: "NRI lost for 2 minutes", alert: "SlingshotAgentNRIDisconnected", at: 10 * time.Minute,
		series: `slingshot_agent_nri_connected{node="n1"} 1x5 0 0 1x8`},

	{name: "one NIC's default service open", alert: "SlingshotDefaultServiceOpen", at: 8 * time.Minute,
		series: `slingshot_agent_default_service_open{node="n1",nic="cxi0"} 1x10
			slingshot_agent_default_service_open{node="n1",nic="cxi1"} 0x10`,
		want: []map[string]string{{"node": "n1", "nic": "cxi0"}}},
	{name: "default services closed", alert: "SlingshotDefaultServiceOpen", at: 8 * time.Minute,
		series: `slingshot_agent_default_service_open{node="n1",nic="cxi0"} 0x10`},

	{name: "services stuck round after round", alert: "SlingshotServicesStuck", at: 35 * time.Minute,
		series: `slingshot_agent_stuck_services_total{node="n1"} 0+1x40`,
		want:   []map[string]string{{"node": "n1"}}},
	{name: "one stuck round, then freed", alert: "SlingshotServicesStuck", at: 25 * time.Minute,
		series: `slingshot_agent_stuck_services_total{node="n1"} 0x4 1x40`},

	{name: "specs given up on", alert: "SlingshotCDISpecsLate", at: 20 * time.Minute,
		series: `slingshot_agent_cdi_visible_seconds_count{node="n1",result="timeout"} 0x5 1+1x20
			slingshot_agent_cdi_visible_seconds_count{node="n1",result="visible"} 0+30x25
			slingshot_agent_cdi_visible_seconds_count{node="n2",result="timeout"} 0x25`,
		want: []map[string]string{{"node": "n1", "result": "timeout"}}},
	{name: "every spec visible", alert: "SlingshotCDISpecsLate", at: 20 * time.Minute,
		series: `slingshot_agent_cdi_visible_seconds_count{node="n1",result="timeout"} 0x25
			slingshot_agent_cdi_visible_seconds_count{node="n1",result="visible"} 0+30x25`},

	// Every cleanup between 65 s and 131 s: p99 about 130 s.
	{name: "cleanups over a minute", alert: "SlingshotCleanupSlow", at: 35 * time.Minute,
		series: `slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="1.024"} 0x40
			slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="131.072"} 0+10x40
			slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="+Inf"} 0+10x40`,
		want: []map[string]string{{"node": "n1", "instance": "i1"}}},
	{name: "cleanups within a second", alert: "SlingshotCleanupSlow", at: 35 * time.Minute,
		series: `slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="1.024"} 0+10x40
			slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="131.072"} 0+10x40
			slingshot_agent_cleanup_duration_seconds_bucket{node="n1",instance="i1",le="+Inf"} 0+10x40`},

	{name: "a checkpoint write failed", alert: "SlingshotAgentCheckpointWriteErrors", at: 8 * time.Minute,
		series: `slingshot_agent_checkpoint_errors_total{node="n1"} 0x5 1x10`,
		want:   []map[string]string{{"node": "n1"}}},
	{name: "a checkpoint write failed long ago", alert: "SlingshotAgentCheckpointWriteErrors", at: 30 * time.Minute,
		series: `slingshot_agent_checkpoint_errors_total{node="n1"} 0x5 1x30`},

	{name: "an IPAM state write failed", alert: "SlingshotIPAMStateWriteErrors", at: 8 * time.Minute,
		series: `slingshot_agent_ipam_state_errors_total{node="n1"} 0x5 1x10`,
		want:   []map[string]string{{"node": "n1"}}},
	{name: "IPAM state writes fine", alert: "SlingshotIPAMStateWriteErrors", at: 8 * time.Minute,
		series: `slingshot_agent_ipam_state_errors_total{node="n1"} 0x10`},

	{name: "a slice of hsn0 lost", alert: "SlingshotIPSlicesLost", at: 8 * time.Minute,
		series: `slingshot_agent_ipam_lost_slices_total{node="n1",pool="hsn0"} 0x5 1x10
			slingshot_agent_ipam_lost_slices_total{node="n1",pool="hsn1"} 0x15`,
		want: []map[string]string{{"node": "n1", "pool": "hsn0"}}},
	{name: "no slice lost", alert: "SlingshotIPSlicesLost", at: 8 * time.Minute,
		series: `slingshot_agent_ipam_lost_slices_total{node="n1",pool="hsn0"} 0x15`},

	{name: "the leader stepped down and nobody took over", alert: "SlingshotControllerNoLeader", at: 10 * time.Minute,
		series: `slingshot_controller_leader{job="c",namespace="slingshot",instance="a:9442",pod="a"} 1x3 0x10
			slingshot_controller_leader{job="c",namespace="slingshot",instance="b:9442",pod="b"} 0x13`,
		want: []map[string]string{{"job": "c", "namespace": "slingshot"}}},
	{name: "another replica took over", alert: "SlingshotControllerNoLeader", at: 10 * time.Minute,
		series: `slingshot_controller_leader{job="c",namespace="slingshot",instance="a:9442",pod="a"} 1x3 0x10
			slingshot_controller_leader{job="c",namespace="slingshot",instance="b:9442",pod="b"} 0x4 1x9`},

	{name: "no replica ready", alert: "SlingshotControllerNotReady", at: 10 * time.Minute,
		series: `slingshot_controller_ready{job="c",namespace="slingshot",instance="a:9442",pod="a"} 1x2 0x10`,
		want:   []map[string]string{{"job": "c", "namespace": "slingshot"}}},
	{name: "the leader ready, the follower not", alert: "SlingshotControllerNotReady", at: 10 * time.Minute,
		series: `slingshot_controller_ready{job="c",namespace="slingshot",instance="a:9442",pod="a"} 1x12
			slingshot_controller_ready{job="c",namespace="slingshot",instance="b:9442",pod="b"} 0x12`},

	{name: "the VNI range 95% full", alert: "SlingshotRangeNearlyFull", at: 12 * time.Minute,
		series: `slingshot_controller_range_fill_ratio{range="vni"} 0.95x15
			slingshot_controller_range_fill_ratio{range="hsn0"} 0.5x15`,
		want: []map[string]string{{"range": "vni"}}},
	{name: "ranges half full", alert: "SlingshotRangeNearlyFull", at: 12 * time.Minute,
		series: `slingshot_controller_range_fill_ratio{range="vni"} 0.5x15`},

	{name: "one namespace at 95% of its cap", alert: "SlingshotNamespaceLeaseCapNearlyFull", at: 12 * time.Minute,
		series: `slingshot_controller_namespace_lease_fill_ratio{owner_namespace="greedy"} 0.95x15
			slingshot_controller_namespace_lease_fill_ratio{owner_namespace="modest"} 0.3x15`,
		want: []map[string]string{{"owner_namespace": "greedy"}}},
	{name: "namespaces well within the cap", alert: "SlingshotNamespaceLeaseCapNearlyFull", at: 12 * time.Minute,
		series: `slingshot_controller_namespace_lease_fill_ratio{owner_namespace="modest"} 0.3x15`},

	{name: "a steady stream of refused syncs", alert: "SlingshotHookRefusalsRising", at: 35 * time.Minute,
		series: `slingshot_controller_hook_refused_total{hook="sync",reason="uid-mismatch",instance="a"} 0+2x40
			slingshot_controller_hook_refused_total{hook="sync",reason="parent-deleting",instance="a"} 0+5x40`,
		want: []map[string]string{{"hook": "sync", "reason": "uid-mismatch"}}},
	{name: "syncs of deleted parents and a few races", alert: "SlingshotHookRefusalsRising", at: 35 * time.Minute,
		series: `slingshot_controller_hook_refused_total{hook="sync",reason="parent-deleting",instance="a"} 0+5x40
			slingshot_controller_hook_refused_total{hook="finalize",reason="parent-alive",instance="a"} 0+0.5x40`},

	{name: "every reservation failing", alert: "SlingshotFabricManagerReserveFailing", at: 20 * time.Minute,
		series: `slingshot_controller_hwcoll_calls_total{op="reserve",result="ok",instance="a"} 5x5 5x20
			slingshot_controller_hwcoll_calls_total{op="reserve",result="error",instance="a"} 0x5 1+3x20`,
		want: []map[string]string{{"op": "reserve"}}},
	{name: "reservations failing at first, never made", alert: "SlingshotFabricManagerReserveFailing", at: 20 * time.Minute,
		series: `slingshot_controller_hwcoll_calls_total{op="reserve",result="error",instance="a"} 0+2x25`,
		want:   []map[string]string{{"op": "reserve"}}},
	{name: "some reservations retried, all made", alert: "SlingshotFabricManagerReserveFailing", at: 20 * time.Minute,
		series: `slingshot_controller_hwcoll_calls_total{op="reserve",result="ok",instance="a"} 0+1x25
			slingshot_controller_hwcoll_calls_total{op="reserve",result="error",instance="a"} 0+1x25`},
	{name: "releases failing", alert: "SlingshotFabricManagerReleaseFailing", at: 60 * time.Minute,
		series: `slingshot_controller_hwcoll_calls_total{op="release",result="ok",instance="a"} 3x10 3x55
			slingshot_controller_hwcoll_calls_total{op="release",result="error",instance="a"} 0x10 0+1x55
			slingshot_controller_hwcoll_calls_total{op="list",result="ok",instance="a"} 0+1x65`,
		want: []map[string]string{{"op": "release"}}},
	{name: "releases that got through after retries", alert: "SlingshotFabricManagerReleaseFailing", at: 60 * time.Minute,
		series: `slingshot_controller_hwcoll_calls_total{op="release",result="ok",instance="a"} 0+1x65
			slingshot_controller_hwcoll_calls_total{op="release",result="error",instance="a"} 0+2x65`},
}

// Each alert fires on the series that should fire it, with the labels
// that name what to look at, and stays quiet on the near misses: the
// rules are evaluated by Prometheus's rule engine, minute by minute, over
// series loaded into its test storage.
func TestAlerts(t *testing.T) {
	for _, tt := range alertCases {
		t.Run(tt.alert+"/"+tt.name, func(t *testing.T) {
			got, err := firing(filepath.Join(root, RulesPath), tt.series, tt.at, tt.alert)
			if err != nil {
				t.Fatal(err)
			}
			if !sameAlerts(got, tt.want) {
				t.Fatalf("firing at %v: %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}

// Every alert has a case that fires it and one that must not.
func TestEveryAlertHasCases(t *testing.T) {
	rgs, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, c := range alertCases {
		if len(c.want) > 0 {
			fires[c.alert] = true
		} else {
			quiet[c.alert] = true
		}
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && (!fires[r.Alert] || !quiet[r.Alert]) {
				t.Errorf("%s: a case that fires it %v, one that does not %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// firing evaluates the rule file every minute from 0 to at over series,
// as Prometheus would, and returns the labels of alert's firing alerts,
// less alertname and the rule's own labels.
func firing(path, series string, at time.Duration, alert string) ([]map[string]string, error) {
	suite, err := promqltest.NewLazyLoader("load 1m\n"+series, promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: promqlParser,
	})
	if err != nil {
		return nil, fmt.Errorf("load series: %w", err)
	}
	defer suite.Close()
	ctx := context.Background()
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.DiscardHandler),
		Parser:       promqlParser,
	})
	groups, errs := m.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, path)
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	var rule *rules.AlertingRule
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				// As after a restore: a restart's "for" state is not
				// what these cases test.
				ar.SetRestored(true)
				if ar.Name() == alert {
					rule = ar
				}
			}
		}
	}
	if rule == nil {
		return nil, fmt.Errorf("no alert %s in %s", alert, path)
	}
	var evalErr error
	start := time.Unix(0, 0).UTC()
	for ts := start; !ts.After(start.Add(at)); ts = ts.Add(time.Minute) {
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(ctx, ts)
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil && evalErr == nil {
						evalErr = fmt.Errorf("rule %s at %v: %w", r.Name(), ts.Sub(start), err)
					}
				}
			}
		})
		if evalErr != nil {
			return nil, evalErr
		}
	}
	var out []map[string]string
	for _, a := range rule.ActiveAlerts() {
		if a.State != rules.StateFiring {
			continue
		}
		l := a.Labels.Map()
		delete(l, labels.AlertName)
		for k := range rule.Labels().Map() {
			delete(l, k)
		}
		out = append(out, l)
	}
	return out, nil
}

// sameAlerts compares label sets in any order.
func sameAlerts(got, want []map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if !used[i] && maps.Equal(g, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// The documented table of alerts (docs/metrics.md) names every alert of
// the rule file, with its severity, and no other.
func TestDocsListTheAlerts(t *testing.T) {
	rgs, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Alerts and dashboard\n")
	if !ok {
		t.Fatal("docs/metrics.md: no Alerts and dashboard section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]string{}
	for line := range strings.SplitSeq(section, "\n") {
		if m := readmeAlertRE.FindStringSubmatch(line); m != nil {
			listed[m[1]] = m[2]
		}
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			sev, ok := listed[r.Alert]
			if !ok {
				t.Errorf("docs/metrics.md does not list %s", r.Alert)
			} else if sev != r.Labels["severity"] {
				t.Errorf("docs/metrics.md gives %s severity %s; the rule's is %s", r.Alert, sev, r.Labels["severity"])
			}
			delete(listed, r.Alert)
		}
	}
	for name := range listed {
		t.Errorf("docs/metrics.md lists %s, which is no alert", name)
	}
}

var readmeAlertRE = regexp.MustCompile("^\\| `(Slingshot[A-Za-z]+)` \\| ([a-z]+) \\|")

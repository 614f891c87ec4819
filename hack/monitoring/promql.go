package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// promqlParser is Prometheus's own PromQL parser with its default
// options: what a Prometheus server that loads the rules accepts.
var promqlParser = parser.NewParser(parser.Options{})

// LoadRules parses the chart's rule file as Prometheus loads one: the
// YAML, every expression, every annotation's and label's template.
func LoadRules(root string) (*rulefmt.RuleGroups, error) {
	rgs, errs := rulefmt.ParseFile(filepath.Join(root, RulesPath), false, model.UTF8Validation, promqlParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("rules: %w", joinErrs(errs))
	}
	return rgs, nil
}

func joinErrs(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// Query is one PromQL expression of the rules or the dashboard, and where
// it is.
type Query struct {
	Where string
	Expr  string
}

// RuleQueries are the expressions of every rule.
func RuleQueries(rgs *rulefmt.RuleGroups) []Query {
	var qs []Query
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			qs = append(qs, Query{Where: "rule " + g.Name + "/" + name, Expr: r.Expr})
		}
	}
	return qs
}

// DashboardQueries are the PromQL expressions of the dashboard file:
// every panel's targets, in rows or not, and the query variables'
// label_values selectors, with Grafana's variables replaced by values of
// their kind so that Prometheus's parser can read them.
func DashboardQueries(root string) ([]Query, error) {
	b, err := os.ReadFile(filepath.Join(root, DashboardPath))
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", DashboardPath, err)
	}
	var qs []Query
	var walk func(ps []dashPanel) error
	walk = func(ps []dashPanel) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				expr, err := expandVariables(t.Expr)
				if err != nil {
					return fmt.Errorf("panel %q target %s: %w", p.Title, t.RefID, err)
				}
				qs = append(qs, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, ok := v.Query.(string)
		if !ok {
			return nil, fmt.Errorf("variable %s: query %v is not a string", v.Name, v.Query)
		}
		// label_values(SELECTOR, LABEL) is Grafana's, not PromQL: the
		// selector is checked as a query that groups by the label.
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
		}
		qs = append(qs, Query{Where: "variable " + v.Name, Expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	return qs, nil
}

type dashPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

var (
	labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	variableRE    = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)
)

// grafanaVariables are the values the variables of the dashboard's
// queries stand for when parsed: a duration for Grafana's intervals, a
// label value for the dashboard's own.
var grafanaVariables = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "6h",
	"node":            "node-a",
}

// expandVariables replaces the Grafana variables of expr; an unknown one
// is an error, so that a new variable is given a value here.
func expandVariables(expr string) (string, error) {
	var unknown []string
	out := variableRE.ReplaceAllStringFunc(expr, func(v string) string {
		name := variableRE.FindStringSubmatch(v)[1]
		val, ok := grafanaVariables[name]
		if !ok {
			unknown = append(unknown, v)
			return v
		}
		return val
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown Grafana variables %v in %q", unknown, expr)
	}
	return out, nil
}

// Use is a metric one expression selects, with the labels its selector
// matches on.
type Use struct {
	Metric string
	Labels []string
}

// Grouping is an aggregation's grouping labels or a binary operation's
// matching labels, and the metrics selected beneath it: each label must
// be carried by at least one of them.
type Grouping struct {
	Labels  []string
	Metrics []string
}

// Uses parses expr with Prometheus's parser and lists the metrics it
// selects and the groupings over them.
func Uses(expr string) ([]Use, []Grouping, error) {
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return nil, nil, err
	}
	var uses []Use
	var groups []Grouping
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			u := Use{Metric: n.Name}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel {
					u.Labels = append(u.Labels, m.Name)
				}
			}
			uses = append(uses, u)
		case *parser.AggregateExpr:
			if len(n.Grouping) > 0 {
				groups = append(groups, Grouping{Labels: n.Grouping, Metrics: selected(n.Expr)})
			}
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				if labels := slices.Concat(vm.MatchingLabels, vm.Include); len(labels) > 0 {
					groups = append(groups, Grouping{Labels: labels, Metrics: slices.Concat(selected(n.LHS), selected(n.RHS))})
				}
			}
		}
		return nil
	})
	return uses, groups, nil
}

// selected are the metric names of the selectors under n.
func selected(n parser.Node) []string {
	var out []string
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

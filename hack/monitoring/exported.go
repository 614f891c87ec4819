package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Family is one exported metric family: its type and label names.
type Family struct {
	Type   dto.MetricType
	Labels map[string]bool
}

// Families are metric families by name, as a scrape or a registry shows
// them.
type Families map[string]*Family

func (fs Families) add(name string, typ dto.MetricType, labels ...string) {
	f := fs[name]
	if f == nil {
		f = &Family{Type: typ, Labels: map[string]bool{}}
		fs[name] = f
	}
	for _, l := range labels {
		f.Labels[l] = true
	}
}

// merge adds other's families and labels to fs.
func (fs Families) merge(other Families) {
	for name, f := range other {
		fs.add(name, f.Type, sortedKeys(f.Labels)...)
	}
}

// ParseScrape reads a /metrics body in Prometheus's text format.
func ParseScrape(r io.Reader, into Families) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parse scrape: %w", err)
	}
	for name, mf := range mfs {
		into.add(name, mf.GetType())
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				into.add(name, mf.GetType(), l.GetName())
			}
		}
	}
	return nil
}

// Series are the names a family's samples carry, with the labels each
// has: a classic histogram's _bucket (with le), _sum and _count; a
// summary's own name (with quantile), _sum and _count.
func (fs Families) Series() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	with := func(f *Family, extra ...string) map[string]bool {
		ls := map[string]bool{}
		for l := range f.Labels {
			ls[l] = true
		}
		for _, l := range extra {
			ls[l] = true
		}
		return ls
	}
	for name, f := range fs {
		switch f.Type {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"] = with(f, "le")
			out[name+"_sum"] = with(f)
			out[name+"_count"] = with(f)
		case dto.MetricType_SUMMARY:
			out[name] = with(f, "quantile")
			out[name+"_sum"] = with(f)
			out[name+"_count"] = with(f)
		default:
			out[name] = with(f)
		}
	}
	return out
}

// recorder is a prometheus.Registerer that keeps what components
// declare, for the families of a mode the live test does not run (the
// controller's leader election needs a Kubernetes API): a vector without
// children is declared but not yet exported, and its label names are only
// in its Desc.
type recorder struct {
	fams Families
}

var (
	descNameRE   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabelsRE = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	typ, err := collectorType(c)
	if err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		s := d.String()
		name, labels := descNameRE.FindStringSubmatch(s), descLabelsRE.FindStringSubmatch(s)
		if name == nil || labels == nil {
			return fmt.Errorf("unreadable metric description %s", s)
		}
		var ls []string
		if labels[1] != "" {
			ls = strings.Split(labels[1], ",")
		}
		r.fams.add(name[1], typ, ls...)
	}
	return nil
}

// collectorType is the type of c's metrics: a vector's by its Go type
// (it may have no children yet), any other's by what it collects.
func collectorType(c prometheus.Collector) (dto.MetricType, error) {
	switch c.(type) {
	case *prometheus.HistogramVec:
		return dto.MetricType_HISTOGRAM, nil
	case *prometheus.SummaryVec:
		return dto.MetricType_SUMMARY, nil
	case *prometheus.CounterVec:
		return dto.MetricType_COUNTER, nil
	case *prometheus.GaugeVec:
		return dto.MetricType_GAUGE, nil
	}
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	typ := dto.MetricType_UNTYPED
	var err error
	for m := range ch {
		var pb dto.Metric
		if werr := m.Write(&pb); werr != nil {
			err = fmt.Errorf("collect %s: %w", m.Desc(), werr)
			continue
		}
		switch {
		case pb.Histogram != nil:
			typ = dto.MetricType_HISTOGRAM
		case pb.Summary != nil:
			typ = dto.MetricType_SUMMARY
		case pb.Counter != nil:
			typ = dto.MetricType_COUNTER
		case pb.Gauge != nil:
			typ = dto.MetricType_GAUGE
		}
	}
	return typ, err
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// targetLabels are the labels Prometheus adds to every series it scrapes
// from a pod (Prometheus Operator's ServiceMonitor): the rules and panels
// may use them on any metric.
var targetLabels = []string{"instance", "job", "namespace", "pod", "service", "container", "endpoint"}

// agentTargetLabels are added to the agent's series only: the chart's
// ServiceMonitor relabels the node's name into node.
var agentTargetLabels = []string{"node"}

func labelsOn(series map[string]map[string]bool, metric string) map[string]bool {
	ls := map[string]bool{}
	for l := range series[metric] {
		ls[l] = true
	}
	for _, l := range targetLabels {
		ls[l] = true
	}
	if strings.HasPrefix(metric, "slingshot_agent_") {
		for _, l := range agentTargetLabels {
			ls[l] = true
		}
	}
	return ls
}

// Check reports every metric a query selects that fs does not export,
// every label a selector matches that its metric lacks, and every
// grouping or matching label that none of the metrics beneath it has.
func Check(q Query, fs Families) []error {
	uses, groups, err := Uses(q.Expr)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", q.Where, err)}
	}
	series := fs.Series()
	var errs []error
	for _, u := range uses {
		if _, ok := series[u.Metric]; !ok {
			errs = append(errs, fmt.Errorf("%s: metric %s is exported by neither the agent nor the controller", q.Where, u.Metric))
			continue
		}
		have := labelsOn(series, u.Metric)
		for _, l := range u.Labels {
			if !have[l] {
				errs = append(errs, fmt.Errorf("%s: %s has no label %s (it has %v)", q.Where, u.Metric, l, sortedKeys(have)))
			}
		}
	}
	for _, g := range groups {
		for _, l := range g.Labels {
			found := false
			for _, m := range g.Metrics {
				if _, ok := series[m]; ok && labelsOn(series, m)[l] {
					found = true
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("%s: label %s, grouped or matched on, is on none of %v", q.Where, l, g.Metrics))
			}
		}
	}
	return errs
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

package main

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// A timeline is what Prometheus would hold of one target scraped once a
// minute: sample i is the scrape at minute i, each series (a promqltest
// selector, the target's labels included) with its value. Loaded into the
// rule tests' storage (firing), it lets the rule engine judge series a
// real agent exported.
type timeline []map[string]float64

// target is a scraped agent as Prometheus labels its series: the chart's
// ServiceMonitor adds the node's name as node, Prometheus the instance and
// job.
type target struct {
	node, instance, job string
}

// sample reads one scrape in Prometheus's text format, keeping the series
// whose names are in keep (a classic histogram's _bucket, _sum and _count
// by those names), with t's labels added.
func sample(body []byte, keep map[string]bool, t target) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse scrape: %w", err)
	}
	out := map[string]float64{}
	add := func(name string, m *dto.Metric, v float64, extra ...string) {
		if !keep[name] {
			return
		}
		ls := map[string]string{"node": t.node, "instance": t.instance, "job": t.job}
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(extra); i += 2 {
			ls[extra[i]] = extra[i+1]
		}
		out[selector(name, ls)] = v
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", m, float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", m, float64(h.GetSampleCount()), "le", "+Inf")
				add(name+"_sum", m, h.GetSampleSum())
				add(name+"_count", m, float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					add(name, m, q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				add(name+"_sum", m, s.GetSampleSum())
				add(name+"_count", m, float64(s.GetSampleCount()))
			}
		}
	}
	return out, nil
}

// selector writes a series as promqltest reads it: name{label="value",...}
// with the labels sorted.
func selector(name string, ls map[string]string) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(ls)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + strconv.Quote(ls[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// series writes the timeline as promqltest's series lines (firing's
// input): each series' value minute by minute, "_" where a scrape did
// not have it.
func (tl timeline) series() string {
	names := map[string]bool{}
	for _, s := range tl {
		for k := range s {
			names[k] = true
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(names)) {
		b.WriteString(k)
		for _, s := range tl {
			v, ok := s[k]
			switch {
			case !ok:
				b.WriteString(" _")
			case math.IsInf(v, 1):
				b.WriteString(" Inf")
			case math.IsNaN(v):
				b.WriteString(" NaN")
			default:
				b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// then is tl followed by s, n times: the same scrape held for n minutes.
func (tl timeline) then(s map[string]float64, n int) timeline {
	for range n {
		tl = append(tl, s)
	}
	return tl
}

// A scrape becomes promqltest series with the target's labels: a
// counter, a gauge's labels, a histogram's cumulative buckets, sum and
// count; families not kept are left out, and a series missing from a
// scrape is a gap.
func TestTimelineSeries(t *testing.T) {
	tg := target{node: "n1", instance: "127.0.0.1:1", job: "agent"}
	keep := map[string]bool{"a_total": true, "g": true, "h_seconds_bucket": true, "h_seconds_count": true}
	first, err := sample([]byte(`# TYPE a_total counter
a_total 3
# TYPE g gauge
g{nic="cxi0"} 1
# TYPE h_seconds histogram
h_seconds_bucket{le="0.5"} 1
h_seconds_bucket{le="+Inf"} 2
h_seconds_sum 1.5
h_seconds_count 2
# TYPE other_total counter
other_total 9
`), keep, tg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := sample([]byte("# TYPE a_total counter\na_total 4\n"), keep, tg)
	if err != nil {
		t.Fatal(err)
	}
	got := timeline{}.then(first, 2).then(second, 1).series()
	want := `a_total{instance="127.0.0.1:1",job="agent",node="n1"} 3 3 4
g{instance="127.0.0.1:1",job="agent",nic="cxi0",node="n1"} 1 1 _
h_seconds_bucket{instance="127.0.0.1:1",job="agent",le="+Inf",node="n1"} 2 2 _
h_seconds_bucket{instance="127.0.0.1:1",job="agent",le="0.5",node="n1"} 1 1 _
h_seconds_count{instance="127.0.0.1:1",job="agent",node="n1"} 2 2 _
`
	if got != want {
		t.Fatalf("series:\n%s\nwant:\n%s", got, want)
	}
	// The rule tests' loader reads them.
	suite, err := promqltest.NewLazyLoader("load 1m\n"+got, promqltest.LazyLoaderOpts{Parser: promqlParser})
	if err != nil {
		t.Fatalf("the series do not load: %v", err)
	}
	suite.Close()
}

// Package buildinfo exports a binary's build as the Prometheus gauge
// slingshot_build_info. It is apart from internal/version so that the
// binaries that serve no metrics (slingshot-ipam) link no Prometheus.
package buildinfo

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/internal/version"
)

// Name is the metric's name. The agent and the controller export it
// alike: it describes the binary, not either program's work, which is
// why it is not under slingshot_agent_ or slingshot_controller_; the
// scrape's job or pod labels tell them apart.
const Name = "slingshot_build_info"

// NewCollector returns the gauge slingshot_build_info{version,commit,
// build_date,go_version}, always 1: the common idiom that lets a query
// join a binary's build onto any of its series, and count the versions
// running (`count by (version) (slingshot_build_info)`).
func NewCollector(i version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: Name,
		Help: "The binary's build: its release, git commit, build date and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version":    i.Version,
			"commit":     i.Commit,
			"build_date": i.BuildDate,
			"go_version": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}

package health

import (
	"log/slog"
	"testing"
)

// BenchmarkPollOneNIC measures one re-read of a NIC from a sysfs tree
// (properties, operstate, speeds, counters) and the health verdict: the
// work a tick or a link event costs per NIC.
func BenchmarkPollOneNIC(b *testing.B) {
	tr := newSysfsTree(b)
	m := New(Config{Targets: []Target{tr.target()}, Logger: slog.New(slog.DiscardHandler)})
	p := poller{m: m}
	st := &nicState{Target: tr.target(), logged: map[string]bool{}}
	for b.Loop() {
		next, r := p.read(st)
		next.Healthy, next.Problem = judge(r)
		if !next.Healthy {
			b.Fatal(next.Problem)
		}
	}
}

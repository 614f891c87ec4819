package agent

import (
	"context"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// usageReader sums what a NIC's services reserve; *cxi.Client is one.
type usageReader interface {
	UsageOf(svcs []cxi.Service) cxi.Usage
}

// reservationsOf is inspect's view of what the services svcs of NIC name
// reserve; none where drv cannot tell (a test's fake driver).
func reservationsOf(name string, drv engine.Driver, svcs []cxi.Service) []inspect.Reservation {
	ur, ok := drv.(usageReader)
	if !ok {
		return nil
	}
	var out []inspect.Reservation
	for _, row := range ur.UsageOf(svcs).Rows() {
		out = append(out, inspect.Reservation{NIC: name, Resource: row.Resource, Max: row.Max, Reserved: row.Reserved, Free: row.Free})
	}
	return out
}

// observeReservations sets n's reservation gauges from its services as
// the driver lists them now: the driver is the account, since other tools
// make services too. A NIC that cannot be listed keeps its last values.
func observeReservations(ctx context.Context, m *metrics, n *nic) {
	svcs, err := n.drv.List(ctx)
	if err != nil {
		return
	}
	for _, r := range reservationsOf(n.name, n.drv, svcs) {
		m.nicReserved.WithLabelValues(n.name, r.Resource).Set(float64(r.Reserved))
		m.nicFree.WithLabelValues(n.name, r.Resource).Set(float64(r.Free))
	}
}

// reservedOf is what service s reserves, by resource; nil for nothing.
func reservedOf(s cxi.Service) map[string]int {
	if s.Limits == nil {
		return nil
	}
	var out map[string]int
	for name, l := range map[string]cxi.Limit{
		"PTEs": s.Limits.PTEs, "TXQs": s.Limits.TXQs, "TGQs": s.Limits.TGQs, "EQs": s.Limits.EQs,
		"CTs": s.Limits.CTs, "LEs": s.Limits.LEs, "TLEs": s.Limits.TLEs, "ACs": s.Limits.ACs,
	} {
		if l.Res > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[name] = int(l.Res)
		}
	}
	return out
}

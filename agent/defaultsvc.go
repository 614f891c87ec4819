package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// defaultServiceGuard watches each NIC's default CXI service (ID 1). The
// driver keeps it disabled, but an admin can enable it at any time
// (`cxi_service enable -s 1`, as some device plugins require), and then
// every pod holding a NIC may use its VNIs, whatever job it belongs to:
// the isolation the agent's services give is gone. The guard checks at
// start and every interval after, sets
// slingshot_agent_default_service_open{nic}, logs each change, and keeps
// /readyz failing, naming the NICs, while any is open, unless the admin
// accepts it (allowOpenDefaultService). It destroys and disables nothing:
// the default service is the admin's.
type defaultServiceGuard struct {
	nics   []*nic // by index
	m      *metrics
	logger *slog.Logger
	// allow is allowOpenDefaultService, swapped on a configuration reload.
	allow atomic.Bool
	// events tell the node of each change; node is its name.
	events eventRecorder
	node   string

	mu    sync.Mutex
	state map[string]defaultServiceState // by NIC name; absent until checked
}

// defaultServiceState is the last check of one NIC.
type defaultServiceState struct {
	finding cxi.DefaultServiceFinding
	err     error
}

func newDefaultServiceGuard(nics nicSet, m *metrics, logger *slog.Logger, allow bool) *defaultServiceGuard {
	g := &defaultServiceGuard{nics: nics.byIndex(), m: m, logger: logger.With("component", "default-service"), state: map[string]defaultServiceState{}, events: event.Nop{}}
	g.allow.Store(allow)
	return g
}

// setAllow applies a reloaded allowOpenDefaultService.
func (g *defaultServiceGuard) setAllow(allow bool) { g.allow.Store(allow) }

// run checks every interval until ctx ends; the start-up check is
// [defaultServiceGuard.check], called before.
func (g *defaultServiceGuard) run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			g.check(ctx)
		}
	}
}

// check reads every NIC's default service once.
func (g *defaultServiceGuard) check(ctx context.Context) {
	for _, n := range g.nics {
		f, err := cxi.CheckDefaultService(ctx, n.drv)
		if ctx.Err() != nil {
			return // stopping: an error now says nothing of the NIC
		}
		g.record(n.name, defaultServiceState{finding: f, err: err})
		// The same poll keeps the NIC's reservation gauges current.
		observeReservations(ctx, g.m, n)
	}
}

// record stores one NIC's result, sets its gauge and logs a change.
func (g *defaultServiceGuard) record(name string, now defaultServiceState) {
	g.mu.Lock()
	before, seen := g.state[name]
	g.state[name] = now
	g.mu.Unlock()
	if now.err != nil {
		if !seen || before.err == nil {
			g.logger.Warn("cannot check the default CXI service", "nic", name, "err", now.err)
		}
		return // the gauge keeps the last thing known
	}
	open := 0.0
	if now.finding.Open {
		open = 1
	}
	g.m.defaultServiceOpen.WithLabelValues(name).Set(open)
	switch {
	case seen && before.err == nil && before.finding.Open == now.finding.Open:
	case now.finding.Open && g.allow.Load():
		g.logger.Warn("the default CXI service is open, as allowOpenDefaultService accepts: pods of different jobs can share its VNIs",
			"nic", name, "svc_id", cxi.DefaultServiceID, "found", now.finding.Reason)
		g.events.Record(event.Node(g.node), event.DefaultServiceOpen, fmt.Sprintf("The default CXI service of %s is open (%s); allowOpenDefaultService accepts it", name, now.finding.Reason))
	case now.finding.Open:
		g.logger.Error("the default CXI service is open: pods of different jobs can share its VNIs; not ready until it is disabled, or allowOpenDefaultService accepts it",
			"nic", name, "svc_id", cxi.DefaultServiceID, "found", now.finding.Reason)
		g.events.Record(event.Node(g.node), event.DefaultServiceOpen, fmt.Sprintf("The default CXI service of %s is open (%s)", name, now.finding.Reason))
	case seen && before.err == nil && before.finding.Open:
		g.logger.Info("the default CXI service is closed again", "nic", name, "found", now.finding.Reason)
		g.events.Record(event.Node(g.node), event.DefaultServiceShut, fmt.Sprintf("The default CXI service of %s is closed again (%s)", name, now.finding.Reason))
	case seen:
		g.logger.Info("the default CXI service is closed again", "nic", name, "found", now.finding.Reason)
	}
}

// notReady says why the agent must not report ready, or "" when the
// default service of every NIC has been checked and is closed, or its
// being open is accepted.
func (g *defaultServiceGuard) notReady() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var why []string
	for _, n := range g.nics {
		st, seen := g.state[n.name]
		switch {
		case !seen:
			why = append(why, fmt.Sprintf("the default CXI service of %s is not checked yet", n.name))
		case st.err != nil:
			why = append(why, fmt.Sprintf("cannot check the default CXI service of %s: %v", n.name, st.err))
		case st.finding.Open && !g.allow.Load():
			why = append(why, fmt.Sprintf("the default CXI service (ID %d) of %s is open, %s; disable it (cxi_service disable -s %d -d %s) or set allowOpenDefaultService: true",
				cxi.DefaultServiceID, n.name, st.finding.Reason, cxi.DefaultServiceID, n.name))
		}
	}
	return strings.Join(why, "; ")
}

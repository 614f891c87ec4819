package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
)

// eventRecorder writes the agent's Kubernetes events (event.Recorder):
// the client-go sink behind its limits, or event.Nop for a standalone
// agent.
type eventRecorder interface {
	Record(obj event.Object, reason event.Reason, what string)
}

// pendingDestroy is one holder's services that should be destroyed and
// are not yet: a gone pod's (device plugin), an unpreparing claim's (DRA).
type pendingDestroy struct {
	// owner names the holder, "pod ns/name" or "claim ns/name".
	owner string
	// pods are told when the services are stuck.
	pods     []event.Object
	services []string // "cxi0:12"
	// since is when their destruction began; zero when the record does
	// not say (a claim's unprepare), and the watch counts from when it
	// first saw them.
	since time.Time
}

// pendingOf are the holders whose services should be destroyed and are
// not yet, whichever front end they came through, dated from when their
// teardown began.
func pendingOf(eng *engine.Engine) []pendingDestroy {
	var out []pendingDestroy
	for _, h := range eng.Pending() {
		d := pendingDestroy{owner: h.String(), since: *h.Exited}
		if h.Kind == checkpoint.KindPod {
			d.pods = []event.Object{event.Pod(h.Namespace, h.Name, h.UID)}
		}
		for _, p := range h.Pods {
			d.pods = append(d.pods, event.Pod(p.Namespace, p.Name, p.UID))
		}
		for _, s := range h.Services {
			d.services = append(d.services, fmt.Sprintf("%s:%d", s.NIC, s.ID))
		}
		out = append(out, d)
	}
	return out
}

// taintSetter puts the cleanup-stuck taint on the node or takes it off;
// nodeTaints is one.
type taintSetter interface {
	has(ctx context.Context) (bool, error)
	set(ctx context.Context, on bool) (changed bool, err error)
}

// drainWatch makes a node that cannot clean up stop taking pods: while
// any service of a gone pod (or unprepared claim) stays undestroyed past
// cleanup.drainAfter, the node carries the cleanup-stuck NoSchedule
// taint, and once they are all destroyed it no longer does. The VNIs stay
// held meanwhile (the cleanup releases a lease only after its services
// are gone). Its state is derived from the record at every pass, so an
// agent restart neither drops a taint that is still due nor keeps one
// that is not. Not safe for concurrent use: run owns it.
type drainWatch struct {
	node    string
	after   *atomic.Int64 // cleanup.drainAfter, reloadable
	pending func() []pendingDestroy
	taint   taintSetter // nil: no Kubernetes API, only events (none) and the log
	events  eventRecorder
	logger  *slog.Logger
	now     func() time.Time
	stuckG  func(n int)

	firstSeen map[string]time.Time // owner → first pass that saw it pending
	told      map[string]bool      // owners whose pods were told they are stuck
	// tainted is what the node is known to carry; nil before the first
	// pass read it.
	tainted *bool
}

func (w *drainWatch) drainAfter() time.Duration { return time.Duration(w.after.Load()) }

// interval is how often run passes: often enough that a short drainAfter
// is kept to within a quarter, never more than 30s.
func (w *drainWatch) interval() time.Duration {
	return min(max(w.drainAfter()/4, time.Second), 30*time.Second)
}

// run passes at once and then every interval until ctx ends.
func (w *drainWatch) run(ctx context.Context) error {
	if w.taint == nil {
		w.logger.Warn("no Kubernetes API (--no-kube): a node whose services stay busy past cleanup.drainAfter is not tainted; the log says so")
	}
	for {
		w.pass(ctx)
		t := time.NewTimer(w.interval())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// pass compares what is pending with drainAfter and brings the node's
// taint in line. A failed read or write of the node is logged and tried
// again at the next pass.
func (w *drainWatch) pass(ctx context.Context) {
	if w.firstSeen == nil {
		w.firstSeen, w.told = map[string]time.Time{}, map[string]bool{}
	}
	first := w.tainted == nil
	if first && w.taint != nil {
		has, err := w.taint.has(ctx)
		if err != nil {
			w.logger.Warn("read the node's cleanup-stuck taint; trying again", "err", err)
			return
		}
		w.tainted = &has
	}
	now, after := w.now(), w.drainAfter()
	pend := w.pending()
	var stuck []pendingDestroy
	seen := map[string]bool{}
	for _, p := range pend {
		seen[p.owner] = true
		since := p.since
		if since.IsZero() {
			s, ok := w.firstSeen[p.owner]
			if !ok {
				s = now
				// A taint found at start was put for services that were
				// stuck then: those the record cannot date count as stuck
				// still, so a restart does not lift it for drainAfter.
				if first && w.tainted != nil && *w.tainted {
					s = now.Add(-after)
				}
				w.firstSeen[p.owner] = s
			}
			since = s
		}
		if now.Sub(since) >= after {
			stuck = append(stuck, p)
		}
	}
	for o := range w.firstSeen {
		if !seen[o] {
			delete(w.firstSeen, o)
		}
	}
	for o := range w.told {
		if !seen[o] {
			delete(w.told, o)
		}
	}
	n := 0
	for _, p := range stuck {
		n += len(p.services)
		if w.told[p.owner] {
			continue
		}
		w.told[p.owner] = true
		w.logger.Warn("services of a gone holder still busy past cleanup.drainAfter; its VNI stays held", "holder", p.owner, "services", p.services, "drain_after", after)
		for _, pod := range p.pods {
			w.events.Record(pod, event.CleanupStuck, fmt.Sprintf("CXI services %s made for this pod are still busy more than %s after its cleanup began", strings.Join(p.services, ", "), after))
		}
	}
	w.stuckG(n)
	w.apply(ctx, stuck)
}

// apply puts the taint on while anything is stuck, and takes it off once
// nothing is.
func (w *drainWatch) apply(ctx context.Context, stuck []pendingDestroy) {
	want := len(stuck) > 0
	node := event.Node(w.node)
	if w.taint == nil {
		return
	}
	if *w.tainted == want {
		return
	}
	changed, err := w.taint.set(ctx, want)
	if err != nil {
		w.logger.Error("set the node's cleanup-stuck taint; trying again", "want", want, "err", err)
		return
	}
	*w.tainted = want
	if !changed {
		return
	}
	if want {
		owners := make([]string, 0, len(stuck))
		for _, p := range stuck {
			owners = append(owners, p.owner)
		}
		slices.Sort(owners)
		w.logger.Warn("tainted the node: services still busy past cleanup.drainAfter", "taint", CleanupTaintKey+":NoSchedule", "holders", owners)
		w.events.Record(node, event.NodeCleanupStuck, fmt.Sprintf("CXI services of %s are still busy more than %s after their cleanup began", strings.Join(owners, ", "), w.drainAfter()))
		return
	}
	w.logger.Info("removed the node's cleanup-stuck taint: every stuck service is destroyed", "taint", CleanupTaintKey)
	w.events.Record(node, event.NodeCleanupDone, "") // the catalogue's text says it all
}

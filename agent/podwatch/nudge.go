package podwatch

import (
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// nudger paces the nudges of each resource: at most one is outstanding
// (sent, its rewrite not yet followed by a List without the lag) until
// its wait has passed, and the wait grows while the lag persists, as it
// does while a restarted kubelet's sources are not ready: the kubelet then
// rewrites the checkpoint with every pod still in it, and the List is
// empty. A List without the lag ends the resource's pacing.
type nudger struct {
	fn     func(resource string) // nil: nudging is off
	policy backoff.Policy
	now    func() time.Time

	mu    sync.Mutex // guards state
	state map[string]*nudgeState
}

type nudgeState struct {
	sent int       // nudges sent while the lag lasted
	next time.Time // no nudge before
}

// check nudges resource when it lags and its wait has passed. The clock
// is read, and the nudge sent, outside mu: both may take locks of their
// own.
func (n *nudger) check(resource string, lagging bool) {
	if n.fn == nil {
		return
	}
	var now time.Time
	if lagging {
		now = n.now()
	}
	if n.due(resource, lagging, now) {
		n.fn(resource)
	}
}

// due records that resource lags, or no longer does, at now, and reports
// whether a nudge is due.
func (n *nudger) due(resource string, lagging bool, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !lagging {
		delete(n.state, resource)
		return false
	}
	st := n.state[resource]
	if st == nil {
		st = &nudgeState{}
		n.state[resource] = st
	}
	if now.Before(st.next) {
		return false
	}
	st.sent++
	st.next = now.Add(n.policy.Delay(st.sent))
	return true
}

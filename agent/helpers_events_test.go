package agent

import (
	"sync"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// capturedEvent is one event a test recorder was given.
type capturedEvent struct {
	obj    event.Object
	reason event.Reason
	what   string
}

// capturedEvents records events for a test to read. Safe for concurrent
// use.
type capturedEvents struct {
	mu  sync.Mutex
	all []capturedEvent
}

func (c *capturedEvents) Record(obj event.Object, reason event.Reason, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, capturedEvent{obj, reason, what})
}

// of returns the events of reason.
func (c *capturedEvents) of(reason event.Reason) []capturedEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []capturedEvent
	for _, e := range c.all {
		if e.reason == reason {
			out = append(out, e)
		}
	}
	return out
}

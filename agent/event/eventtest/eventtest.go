// Package eventtest records the agent's events for tests, in place of the
// Kubernetes sink.
package eventtest

import (
	"sync"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// Event is one event a Recorder was given.
type Event struct {
	Obj    event.Object
	Reason event.Reason
	What   string
}

// Recorder keeps every event it is given. Safe for concurrent use; the
// zero value is ready.
type Recorder struct {
	mu  sync.Mutex
	all []Event
}

// Record keeps the event.
func (r *Recorder) Record(obj event.Object, reason event.Reason, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, Event{obj, reason, what})
}

// Of returns the events of reason, oldest first.
func (r *Recorder) Of(reason event.Reason) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.all {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// All returns every event, oldest first.
func (r *Recorder) All() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.all...)
}

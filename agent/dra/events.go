package dra

import (
	"errors"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
)

// Events writes the DRA path's Kubernetes events; the agent's limited
// client-go sink is one, event.Nop another. The catalogue of reasons is
// package event's.
type Events interface {
	Record(obj event.Object, reason event.Reason, what string)
}

// sharedClaimError is the refusal of a claim's second pod: its message
// is sharedClaimMessage's, its event event.SharedClaimRefused.
type sharedClaimError string

func (e sharedClaimError) Error() string { return string(e) }

// refusalReason is the event of a refused bind or container: a shared
// claim's, an hsn address the allocator refused (as the device plugin
// tells it), or any other bind's.
func refusalReason(err error) event.Reason {
	if _, ok := errors.AsType[sharedClaimError](err); ok {
		return event.SharedClaimRefused
	}
	if errors.Is(err, engine.ErrAddressRefused) {
		return event.AddressRefused
	}
	return event.BindRefused
}

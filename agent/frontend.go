package agent

import (
	"context"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
)

// frontEnd serves the node's NICs to the kubelet through one API: the
// device plugin (devplugin.Front) or DRA (draFront, dramode.go, over
// agent/dra). The agent builds one, as --api says, over the one bind
// engine; nothing of the other API is built, and run starts the front
// end's units beside the common ones.
type frontEnd interface {
	// Start reconciles the driver with the record and begins serving the
	// kubelet; fatal stops the agent with an error a unit cannot mend.
	Start(ctx context.Context, fatal func(error)) error
	// Loops are the front end's units, each returning when ctx ends.
	Loops(ctx context.Context) []func() error
	// HealthChanged tells the kubelet (or the scheduler) of NIC health.
	HealthChanged()
	// Serving reports whether the kubelet is served.
	Serving() bool
	// NotReady says why the front end cannot keep its promises, or "".
	NotReady() string
	// Report adds the front end's part to the inspect view.
	Report(ctx context.Context, r *inspect.Report)
	// Reload applies a changed configuration's part of the front end.
	Reload(c config.Config)
	// Stop releases what Start took, after every unit returned.
	Stop()
	// Describe is what the "agent ready" line says of the front end.
	Describe() []any
}

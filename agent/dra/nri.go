package dra

import (
	"context"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/nri"
)

// Sandbox is a pod's sandbox as the runtime reports it.
type Sandbox = nri.Sandbox

// NewNRIState is the state of the agent's connection to the runtime's
// NRI socket, counted into m (nil: not counted). Without the connection
// nothing binds a claim's services when its pod's sandbox starts, so the
// agent is not ready and Prepare is refused (ManagerConfig.BindReady).
func NewNRIState(socket string, m *Metrics) *nri.State {
	return nri.NewState(socket, m.setNRIConnected)
}

// NRI is the claims' side of the runtime's NRI calls: bind at
// RunPodSandbox, check at CreateContainer, bind late at Synchronize.
func (m *Manager) NRI() nri.Front { return nriFront{m} }

type nriFront struct{ m *Manager }

func (f nriFront) Bind(ctx context.Context, sb Sandbox) error { return f.m.Bind(ctx, sb) }

func (f nriFront) Check(ctx context.Context, sb Sandbox, ctr nri.Container) ([]string, error) {
	return f.m.Check(ctx, sb, ctr.Env)
}

func (f nriFront) Synchronize(ctx context.Context, sbs []Sandbox) []any {
	rep := f.m.Synchronize(ctx, sbs)
	return []any{"claims_held", rep.Held, "claims_bound_late", rep.Bound, "claims_failed", rep.Failed}
}

// Refused tells the pod, naming the claim's fix where it is a shared one.
func (f nriFront) Refused(sb Sandbox, container string, err error) {
	what := fmt.Sprintf("The pod's sandbox was refused: %v", err)
	if container != "" {
		what = fmt.Sprintf("Container %s was refused: %v", container, err)
	}
	f.m.cfg.Events.Record(event.Pod(sb.Namespace, sb.Name, sb.UID), refusalReason(err), what)
}

package cluster

import (
	"fmt"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
)

// InjectFault makes the node's simulated NIC nic refuse a command (see
// sim.Fault) for the agent and every other user of the NIC, until the
// fault is spent or the returned clear is called. The state is the one
// the agent's driver uses: the fault reaches it on its next command.
func (e *Env) InjectFault(nic string, f sim.Fault) (clear func() error, err error) {
	dev, err := sim.Open(e.SimStateDir, nic, sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("open simulated %s: %w", nic, err)
	}
	if err := dev.InjectFault(f); err != nil {
		_ = dev.Close()
		return nil, err
	}
	return func() error {
		defer dev.Close()
		if err := dev.ClearFaults(); err != nil {
			return fmt.Errorf("clear faults of simulated %s: %w", nic, err)
		}
		return nil
	}, nil
}

package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// inUseVNIs returns every VNI this node uses, for the controller's
// heartbeat: those its checkpoint records for pods and those of every
// service on its NICs (the agent's own and any other). The controller
// drops the node's hold on a lease whose VNI this lacks, so it fails
// rather than answer in part when a NIC's services cannot be listed.
// The checkpoint is read before the driver: a pod cleaned up in between
// is still named by its record.
func (b *binder) inUseVNIs(ctx context.Context) ([]uint16, error) {
	set := map[uint16]bool{}
	for _, p := range b.store.Pods() {
		if p.VNI != 0 {
			set[p.VNI] = true
		}
	}
	for _, c := range b.store.Claims() {
		if c.VNI != 0 {
			set[c.VNI] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.nics)) {
		svcs, err := b.nics[name].drv.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list services on %s: %w", name, err)
		}
		for _, s := range svcs {
			for _, v := range s.VNIs {
				set[v] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

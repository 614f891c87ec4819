package devplugin

import (
	"context"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// ensureHSN has the engine give the pod its interfaces on its NICs' hsn
// netdevs when the resource asks for them, shaped by the pod's network
// request. Idempotent: a restarted container finds the same addresses
// and interfaces.
func (b *binder) ensureHSN(ctx context.Context, key, resource string, nics []*nic, h nsHandle) error {
	pol, ok := b.policy().hsn[resource]
	if !ok {
		return nil
	}
	entry, _ := b.eng.Get(key)
	var want netreq.Request
	if entry.Network != "" {
		var err error
		if want, err = netreq.Parse(entry.Network); err != nil {
			return fmt.Errorf("pod %s, annotation %s: %w", key, netreq.Annotation, err)
		}
	}
	rails := make([]engine.Rail, 0, len(nics))
	for _, n := range nics {
		rails = append(rails, engine.Rail{NIC: n.name, Netdev: n.netdev})
	}
	return b.eng.EnsureHSN(ctx, key, h, engine.HSNRequest{Policy: pol, Rails: rails, Want: want, Pod: key})
}

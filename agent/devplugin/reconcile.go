package devplugin

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// ReconcileOptions say what a start-up reconcile may destroy beyond the
// agent's own orphans: with CleanManaged, every service in the managed VNI
// range [ManagedLo, ManagedHi] that no live pod holds.
type ReconcileOptions struct {
	CleanManaged bool
	ManagedLo    uint16
	ManagedHi    uint16
}

// reconcileReport counts what a reconcile did.
type reconcileReport struct {
	Kept, Adopted, Recreated, Destroyed, CleanedPods, Foreign int
	// Unbound counts live pods whose namespace could not be verified:
	// their services were made unbound, to be bound at the next start of
	// a container.
	Unbound int
}

// Reconcile brings the driver and the checkpoint together after a start,
// through the engine: the services the driver lost are forgotten first;
// gone pods are torn down; each live pod's services are revived
// (engine.Revive: kept and held again where its namespace is verified,
// made unbound where not, those lost made again); services of a bind
// that crashed half-way are adopted or destroyed and, if asked, every
// other non-system service in the managed VNI range is destroyed. A pod
// is gone only when the kubelet no longer holds its devices: where
// PodResources cannot be listed, or lists nothing while the kubelet's
// checkpoint still names the pod (a kubelet just restarted), it is kept.
func (b *binder) Reconcile(ctx context.Context, opts ReconcileOptions) (reconcileReport, error) {
	var rep reconcileReport
	if _, err := b.pods.Refresh(ctx); err != nil {
		b.logger.Warn("kubelet PodResources unavailable; keeping every recorded pod for now", "err", err)
	}
	lost, err := b.eng.ForgetLost(ctx)
	if err != nil {
		return rep, err
	}
	holders := b.eng.Holders(checkpoint.KindPod)
	lost.Sort(holders)
	for _, entry := range holders {
		key := entry.ID()
		unlock := b.eng.Lock(key)
		if entry, ok := b.eng.Get(key); ok && b.gone(entry) {
			if b.cleanupLocked(ctx, key) {
				rep.CleanedPods++
			}
		} else if ok {
			b.revive(ctx, entry, lost.NICs[key], &rep)
		}
		unlock()
	}
	b.eng.ReconcileHSN()
	b.eng.DropStalePins()
	orphans, err := b.eng.Orphans(ctx, engine.OrphanRules{Lo: opts.ManagedLo, Hi: opts.ManagedHi, CleanManaged: opts.CleanManaged},
		func(h checkpoint.Holder) bool { return h.Kind == checkpoint.KindPod && !b.gone(h) })
	rep.Adopted, rep.Destroyed, rep.Foreign = orphans.Adopted, orphans.Destroyed, orphans.Foreign
	return rep, err
}

// revive has the engine bring a live pod's services back on its NICs:
// those it has and those the driver lost. Where they changed, its
// containers' published values name the new ones. The caller holds the
// pod's lock.
func (b *binder) revive(ctx context.Context, entry checkpoint.Holder, lost []string, rep *reconcileReport) {
	if len(entry.Services)+len(lost) == 0 {
		return
	}
	var nics []*nic
	for _, s := range entry.Services {
		if n := b.nics[s.NIC]; n != nil {
			nics = append(nics, n)
		}
	}
	for _, name := range lost {
		if n := b.nics[name]; n != nil && !slices.Contains(nics, n) {
			nics = append(nics, n)
		}
	}
	slices.SortFunc(nics, func(x, y *nic) int { return x.index - y.index })
	open := func() (engine.Handle, error) {
		if entry.UID == "" {
			return nil, errors.New("pod UID unknown")
		}
		return b.netns.Open(ctx, entry.UID)
	}
	var fallback *cxi.Member
	if fb := b.policy().fallback; fb != nil {
		fallback = fb
	}
	how, created, err := b.eng.Revive(ctx, entry.ID(), nicNames(nics), open, fallback)
	rep.Kept += len(entry.Services)
	rep.Recreated += len(created)
	if how == engine.Unheld {
		rep.Unbound++
	}
	if err != nil {
		b.logger.Error("revive a live pod's services", "pod", entry.ID(), "err", err)
	}
	if len(created) > 0 || how == engine.Unheld {
		b.republish(entry.ID())
	}
}

// republish writes key's containers' late-bound values again, after its
// services changed outside a bind.
func (b *binder) republish(key string) {
	entry, ok := b.eng.Get(key)
	if !ok {
		return
	}
	for rec, ids := range entry.DeviceIDs {
		_, resource, _ := strings.Cut(rec, "@")
		resolve := b.resolve[resource]
		if resolve == nil {
			continue // a resource no longer served
		}
		if nics, err := resolve(ids); err == nil {
			if err := b.publish(ids, entry, nics); err != nil {
				b.logger.Error("republish", "pod", key, "err", err)
			}
		}
	}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// reconcileOptions say what a start-up reconcile may destroy beyond the
// agent's own orphans.
type reconcileOptions struct {
	cleanManaged bool
	managedLo    uint16
	managedHi    uint16
}

// reconcileReport counts what a reconcile did.
type reconcileReport struct {
	Kept, Adopted, Recreated, Destroyed, CleanedPods, Foreign int
}

// Reconcile brings the driver and the checkpoint together after a start:
// services of live pods are kept (and re-created if the driver lost them),
// gone pods are cleaned up, services the agent recognises as its own from
// a bind that crashed half-way are adopted or destroyed, and, if asked,
// every other non-system service in the managed VNI range is destroyed.
// A pod is gone only when the kubelet no longer holds its devices: where
// PodResources cannot be listed, or lists nothing while the kubelet's
// checkpoint still names the pod (a kubelet just restarted), it is kept.
func (b *binder) Reconcile(ctx context.Context, opts reconcileOptions) (reconcileReport, error) {
	var rep reconcileReport
	if _, err := b.pods.Refresh(ctx); err != nil {
		b.logger.Warn("kubelet PodResources unavailable; keeping every recorded pod for now", "err", err)
	}

	driver := map[string][]cxi.Service{}
	for name, n := range b.nics {
		svcs, err := n.drv.List(ctx)
		if err != nil {
			return rep, fmt.Errorf("list services on %s: %w", name, err)
		}
		driver[name] = svcs
	}

	owned := map[string]map[uint32]bool{}
	for _, key := range b.store.Keys() {
		unlock := b.podLocks.Lock(key)
		entry, ok := b.store.Get(key)
		if ok && b.gone(entry) {
			if b.cleanupLocked(ctx, key) {
				rep.CleanedPods++
			}
			unlock()
			continue
		}
		kept, recreated := b.keepServices(ctx, key, driver)
		rep.Kept += kept
		rep.Recreated += recreated
		entry, _ = b.store.Get(key)
		b.holdNamespace(ctx, entry)
		for _, s := range entry.Services {
			if owned[s.NIC] == nil {
				owned[s.NIC] = map[uint32]bool{}
			}
			owned[s.NIC][s.ID] = true
		}
		unlock()
	}

	b.reconcileHSN()
	if err := b.reconcileOrphans(ctx, opts, owned, &rep); err != nil {
		return rep, err
	}
	if err := b.save(); err != nil {
		return rep, err
	}
	return rep, nil
}

// reconcileOrphans handles the services no live record owns: those of a
// bind that crashed half-way are adopted when their pod lives, and
// destroyed otherwise, as is, if asked, every other non-system service in
// the managed VNI range.
func (b *binder) reconcileOrphans(ctx context.Context, opts reconcileOptions, owned map[string]map[uint32]bool, rep *reconcileReport) error {
	// List again: the pass before destroyed the services of gone pods.
	driver := map[string][]cxi.Service{}
	for name, n := range b.nics {
		svcs, err := n.drv.List(ctx)
		if err != nil {
			return fmt.Errorf("list services on %s: %w", name, err)
		}
		driver[name] = svcs
	}
	for name, svcs := range driver {
		for _, svc := range svcs {
			if owned[name][svc.ID] || svc.IsDefault() || svc.System {
				continue
			}
			key, entry, recognised := b.recognise(svc)
			switch {
			case recognised && !b.gone(entry):
				if _, err := b.update(key, func(p *checkpoint.Pod) {
					p.Services = append(p.Services, checkpoint.Service{NIC: name, ID: svc.ID, VNIs: slices.Clone(svc.VNIs)})
				}); err != nil {
					b.logger.Error("adopt a service from an interrupted bind; it stays on the driver, unrecorded", "pod", key, "nic", name, "id", svc.ID, "err", err)
					continue
				}
				rep.Adopted++
				b.logger.Info("adopted service from an interrupted bind", "pod", key, "nic", name, "id", svc.ID)
			case recognised || opts.cleanManaged && inRange(svc.VNIs, opts.managedLo, opts.managedHi):
				if err := b.nics[name].drv.Destroy(ctx, svc.ID); err != nil && !errors.Is(err, cxi.ErrNotFound) {
					b.logger.Error("destroy orphan service", "nic", name, "id", svc.ID, "err", err)
					continue
				}
				rep.Destroyed++
				b.logger.Info("destroyed orphan service", "nic", name, "id", svc.ID, "vnis", svc.VNIs)
			default:
				rep.Foreign++
			}
		}
	}
	return nil
}

// keepServices checks a live pod's recorded services against the driver
// and re-creates those the driver lost (a driver reload), republishing
// the new IDs.
func (b *binder) keepServices(ctx context.Context, key string, driver map[string][]cxi.Service) (kept, recreated int) {
	entry, ok := b.store.Get(key)
	if !ok {
		return 0, 0
	}
	var lost []*nic
	for _, s := range entry.Services {
		if slices.ContainsFunc(driver[s.NIC], func(d cxi.Service) bool { return d.ID == s.ID }) {
			kept++
		} else if n := b.nics[s.NIC]; n != nil {
			lost = append(lost, n)
		}
	}
	if len(lost) == 0 {
		return kept, 0
	}
	member, ok := b.recordedMember(entry)
	if !ok {
		b.logger.Error("services of a live pod are gone and no member is known to re-create them", "pod", key)
		return kept, 0
	}
	if _, err := b.update(key, func(p *checkpoint.Pod) {
		p.Services = slices.DeleteFunc(p.Services, func(s checkpoint.Service) bool {
			return slices.ContainsFunc(lost, func(n *nic) bool { return n.name == s.NIC })
		})
	}); err != nil {
		b.logger.Error("drop lost services from the record", "pod", key, "err", err)
		return kept, 0
	}
	created, err := b.ensureServices(ctx, key, lost, member, entry.Netns)
	if err != nil {
		b.logger.Error("re-create lost services", "pod", key, "err", err)
	}
	entry, _ = b.store.Get(key)
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
	return kept, len(created)
}

// holdNamespace opens again, after a restart, the namespace a live pod's
// services name, so that its inode cannot be reused while they live. The
// pod's namespace is found anew and must be the recorded one: the inode
// alone may have passed to another namespace while the agent was down.
func (b *binder) holdNamespace(ctx context.Context, entry checkpoint.Pod) {
	if entry.Netns == 0 || len(entry.Services) == 0 || b.ns.Held(entry.Key()) != 0 {
		return
	}
	h, err := b.netns.Open(ctx, entry.UID)
	if err != nil {
		// Doubt never destroys: the kubelet says the pod lives.
		b.logger.Warn("network namespace of a live pod not found; its services stay, unheld", "pod", entry.Key(), "netns", entry.Netns, "err", err)
		return
	}
	if h.Inode() != entry.Netns {
		b.logger.Warn("a live pod's network namespace is not the one its services name; its next container start binds it anew",
			"pod", entry.Key(), "netns", entry.Netns, "now", h.Inode())
	}
	b.keepIfNamed(entry.Key(), h)
}

// recordedMember is the member a pod's services had: its netns, or the
// fallback member when none was recorded.
func (b *binder) recordedMember(entry checkpoint.Pod) (cxi.Member, bool) {
	if entry.Netns != 0 {
		return cxi.Member{Type: cxi.MemberNetNS, ID: entry.Netns}, true
	}
	if fb := b.policy().fallback; fb != nil {
		return *fb, true
	}
	return cxi.Member{}, false
}

// recognise finds the recorded pod a service was made for by a bind that
// crashed before recording it: same VNI and the pod's netns as member.
func (b *binder) recognise(svc cxi.Service) (string, checkpoint.Pod, bool) {
	for _, entry := range b.store.Pods() {
		if entry.Netns == 0 || !slices.Contains(svc.VNIs, entry.VNI) {
			continue
		}
		if slices.ContainsFunc(svc.Members, func(m cxi.Member) bool { return m.Type == cxi.MemberNetNS && m.ID == entry.Netns }) {
			return entry.Key(), entry, true
		}
	}
	return "", checkpoint.Pod{}, false
}

func inRange(vnis []uint16, lo, hi uint16) bool {
	if len(vnis) == 0 {
		return false
	}
	for _, v := range vnis {
		if v < lo || v > hi {
			return false
		}
	}
	return true
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
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
	// Unbound counts live pods whose namespace could not be verified:
	// their services were made unbound, to be bound at the next start of
	// a container.
	Unbound int
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

	driver, err := b.fab.ListAll(ctx)
	if err != nil {
		return rep, err
	}
	lost, err := b.forgetLost(driver)
	if err != nil {
		return rep, err
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
		if ok {
			b.revive(ctx, key, lost[key], &rep)
		}
		entry, _ = b.store.Get(key)
		for _, s := range entry.Services {
			if owned[s.NIC] == nil {
				owned[s.NIC] = map[uint32]bool{}
			}
			owned[s.NIC][s.ID] = true
		}
		unlock()
	}

	b.reconcileHSN()
	// Pins of pods no longer recorded, or whose services admit nobody, hold
	// namespaces for nothing. Claims' pins are the DRA front end's.
	if err := b.ns.Unpin(func(holder string) bool {
		p, ok := b.store.Get(holder)
		return strings.HasPrefix(holder, engine.ClaimHolder("")) || ok && p.Netns != 0 && len(p.Services) > 0
	}); err != nil {
		b.logger.Warn("drop the pins of namespaces no pod's services admit", "err", err)
	}
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
	driver, err := b.fab.ListAll(ctx)
	if err != nil {
		return err
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
				if err := b.fab.Destroy(ctx, name, svc.ID); err != nil {
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

// forgetLost drops from every record the services the driver lost
// (engine.Listing.Lost: a driver reload, a reboot) before anything is
// made, so that the cleanup of a gone pod or the check of a live one never
// destroys another's new service on a reused ID. It returns, by pod, the
// NICs whose services were lost, to be made again.
func (b *binder) forgetLost(driver engine.Listing) (map[string][]string, error) {
	lost := map[string][]string{}
	for _, entry := range b.store.Pods() {
		vnis := entry.Options.VNIs(entry.VNI)
		gone := func(s checkpoint.Service) bool { return driver.Lost(s.NIC, s.ID, vnis) }
		var nics []string
		for _, s := range entry.Services {
			if gone(s) {
				nics = append(nics, s.NIC)
			}
		}
		if len(nics) == 0 {
			continue
		}
		if _, err := b.update(entry.Key(), func(p *checkpoint.Pod) { p.Services = slices.DeleteFunc(p.Services, gone) }); err != nil {
			return nil, err
		}
		lost[entry.Key()] = nics
		b.logger.Info("the driver lost services of a pod; they are made again", "pod", entry.Key(), "nics", nics)
	}
	return lost, nil
}

// revive brings a live pod's services back after a start. A service
// names its member by inode, and after a reboot or a sandbox made again
// while the agent was down that inode may belong to another pod's
// namespace by now: the services are trusted only once the pod's current
// namespace is found and is the recorded one. Then the services the
// driver lost (a driver reload) are made again and bound to it, and it is
// held. Otherwise every service is made unbound, admitting nobody, and the
// pod's next container start binds them to the namespace it has then.
// The caller holds the pod's lock.
func (b *binder) revive(ctx context.Context, key string, lost []string, rep *reconcileReport) {
	entry, ok := b.store.Get(key)
	if !ok || len(entry.Services)+len(lost) == 0 {
		return
	}
	var nics []*nic
	for _, s := range entry.Services {
		if n := b.nics[s.NIC]; n != nil {
			nics = append(nics, n)
		}
		rep.Kept++
	}
	for _, name := range lost {
		if n := b.nics[name]; n != nil && !slices.Contains(nics, n) {
			nics = append(nics, n)
		}
	}
	slices.SortFunc(nics, func(x, y *nic) int { return x.index - y.index })
	member, h, verified := b.verifiedMember(ctx, entry)
	if !verified {
		rep.Unbound++
		if err := b.unbind(ctx, key, nics); err != nil {
			b.logger.Error("unbind the services of a live pod whose namespace is not verified", "pod", key, "err", err)
			b.events.Record(event.Node(b.node), event.UnbindFailed,
				fmt.Sprintf("Pod %s: its services admit network namespace %d, which could not be verified as the pod's since the agent started, and unbinding them failed: %v", key, entry.Netns, err))
		}
		return
	}
	created, err := b.ensureServices(ctx, key, nics, member, h)
	b.keepIfNamed(key, h)
	if err != nil {
		b.logger.Error("re-create lost services", "pod", key, "err", err)
	}
	rep.Recreated += len(created)
	if len(created) > 0 {
		b.republish(key)
	}
}

// verifiedMember is the member a live pod's services may keep after a
// start: its namespace, when the runtime says it is the recorded one
// (held open by the returned handle), or the configured fallback member
// where none was recorded. It reports false where neither holds.
func (b *binder) verifiedMember(ctx context.Context, entry checkpoint.Pod) (cxi.Member, nsHandle, bool) {
	if entry.Netns == 0 {
		if fb := b.policy().fallback; fb != nil {
			return *fb, nil, true
		}
		b.logger.Error("services of a live pod have no recorded member and no fallback member is configured", "pod", entry.Key())
		return cxi.Member{}, nil, false
	}
	h, err := b.netns.Open(ctx, entry.UID)
	if err != nil {
		// The runtime did not say. A pin that holds the recorded inode
		// proves that no other namespace can have it: it was held all
		// along, so the services admit this pod's namespace or an empty
		// one, never another pod's.
		if pinned, perr := b.ns.Pinned(entry.Key()); perr == nil && pinned.Inode() == entry.Netns {
			b.logger.Info("network namespace of a live pod not found, but its pin holds the recorded one; its services stay bound", "pod", entry.Key(), "netns", entry.Netns, "err", err)
			return cxi.Member{Type: cxi.MemberNetNS, ID: entry.Netns}, pinned, true
		} else if perr == nil {
			_ = pinned.Close()
		}
		b.logger.Warn("network namespace of a live pod not found; its services are made unbound until its next container start",
			"pod", entry.Key(), "netns", entry.Netns, "err", err)
		return cxi.Member{}, nil, false
	}
	if h.Inode() != entry.Netns {
		b.logger.Warn("a live pod's network namespace is not the one its services name (its sandbox was made again); they are made unbound until its next container start",
			"pod", entry.Key(), "netns", entry.Netns, "now", h.Inode())
		_ = h.Close()
		return cxi.Member{}, nil, false
	}
	return cxi.Member{Type: cxi.MemberNetNS, ID: entry.Netns}, h, true
}

// unbind makes every service of key unbound, on the same VNIs, one per
// NIC of nics, recording each step: a service that may admit a namespace
// not verified as the pod's is destroyed and made again, one the driver
// lost is made again. The namespace is let go once none admits it, and
// the environment names the new services.
func (b *binder) unbind(ctx context.Context, key string, nics []*nic) error {
	entry, ok := b.store.Get(key)
	if !ok {
		return nil
	}
	spec, err := engine.ServiceSpec(entry.VNI, entry.Options, b.policy().defaults())
	if err != nil {
		return fmt.Errorf("services of %s: %w", key, err)
	}
	var errs []error
	for _, n := range nics {
		i := slices.IndexFunc(entry.Services, func(s checkpoint.Service) bool { return s.NIC == n.name })
		if i >= 0 {
			svc, err := b.fab.Get(ctx, n.name, entry.Services[i].ID)
			if err == nil && engine.Unbound(svc) {
				continue
			}
			if err != nil && !errors.Is(err, cxi.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			if err == nil {
				if err := b.fab.Destroy(ctx, n.name, entry.Services[i].ID); err != nil {
					errs = append(errs, err)
					continue // still recorded: its namespace is named, and the next bind or cleanup retries
				}
			}
			id := entry.Services[i].ID
			if entry, err = b.update(key, func(p *checkpoint.Pod) {
				p.Services = slices.DeleteFunc(p.Services, func(s checkpoint.Service) bool { return s.NIC == n.name && s.ID == id })
			}); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		id, err := b.fab.Create(ctx, n.name, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rec := checkpoint.Service{NIC: n.name, ID: id, VNIs: slices.Clone(spec.VNIs)}
		if entry, err = b.update(key, func(p *checkpoint.Pod) { p.Services = append(p.Services, rec) }); err != nil {
			errs = append(errs, err, b.fab.Destroy(ctx, n.name, id))
		}
	}
	if len(errs) == 0 {
		if _, err := b.update(key, func(p *checkpoint.Pod) { p.Netns = 0 }); err != nil {
			errs = append(errs, err)
		} else {
			b.ns.Release(key)
		}
	}
	if err := b.save(); err != nil {
		errs = append(errs, err)
	}
	b.republish(key)
	if p, ok := b.store.Get(key); ok {
		b.events.Record(event.Pod(p.Namespace, p.Name, p.UID), event.ServicesUnbound,
			fmt.Sprintf("Its services admitted network namespace %d", entry.Netns))
	}
	return errors.Join(errs...)
}

// republish writes key's containers' late-bound values again, after its
// services changed outside a bind.
func (b *binder) republish(key string) {
	entry, ok := b.store.Get(key)
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

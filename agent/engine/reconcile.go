package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// ForgetLost drops from every record the services the driver lost (a
// driver reload, a reboot: [Listing.Lost]) before anything is made at a
// start, so that the teardown of a gone holder or the check of a live one
// never destroys another's new service on a reused ID. It returns, by
// holder, the NICs whose services were lost, to be made again, and the
// order to make them in ([Lost.Sort]). A failed listing changes nothing.
func (e *Engine) ForgetLost(ctx context.Context) (Lost, error) {
	lost := Lost{NICs: map[string][]string{}, ids: map[string]map[string]uint32{}}
	driver, err := e.fab.ListAll(ctx)
	if err != nil {
		return lost, err
	}
	for _, h := range e.store.All() {
		vnis := h.Options.VNIs(h.VNI)
		gone := func(s checkpoint.Service) bool { return driver.Lost(s.NIC, s.ID, vnis) }
		var nics []string
		for _, s := range h.Services {
			if gone(s) {
				nics = append(nics, s.NIC)
				lost.note(h.ID(), s.NIC, s.ID)
			}
		}
		if len(nics) == 0 {
			continue
		}
		unlock := e.Lock(h.ID())
		_, err := e.Update(h.ID(), func(r *checkpoint.Holder) { r.Services = slices.DeleteFunc(r.Services, gone) })
		unlock()
		if err != nil {
			return lost, fmt.Errorf("forget the services the driver lost: %w", err)
		}
		lost.NICs[h.ID()] = nics
		e.log.Info("the driver lost services of a holder; they are made again", "holder", h.String(), "nics", nics)
	}
	return lost, nil
}

// Lost is what [Engine.ForgetLost] dropped.
type Lost struct {
	// NICs are, by holder, the NICs whose services the driver lost.
	NICs map[string][]string
	// ids are, by holder and NIC, the lowest ID of its lost services
	// there.
	ids map[string]map[string]uint32
}

func (l Lost) note(holder, nic string, id uint32) {
	if l.ids[holder] == nil {
		l.ids[holder] = map[string]uint32{}
	}
	if f, ok := l.ids[holder][nic]; !ok || id < f {
		l.ids[holder][nic] = id
	}
}

// lowest is the lowest ID of holder's lost services on any NIC.
func (l Lost) lowest(holder string) uint32 {
	first := true
	var low uint32
	for _, id := range l.ids[holder] {
		if first || id < low {
			low, first = id, false
		}
	}
	return low
}

// Sort orders holders for the reconcile: those whose services are made
// again first, the others after them in their order. After a driver
// reload, which loses every service, the driver hands out the lowest free
// ID of each NIC again, so the services made again get the IDs they had,
// those the environment of containers that started while the agent was
// down names, where on every NIC the holders are made in the order of the
// IDs they had there. Holders are made together on all their NICs, so the
// order is one that keeps each NIC's (a topological order; among the
// holders free to go next, the one whose lowest ID is lowest): ordering
// by a holder's lowest ID over all its NICs alone would put a holder of
// cxi0/5 and cxi1/3 before one of cxi0/3, and give it cxi0/3. Where the
// NICs' orders disagree, which a driver reusing freed IDs can make, the
// holder with the lowest ID goes first.
func (l Lost) Sort(holders []checkpoint.Holder) {
	var made, rest []checkpoint.Holder
	for _, h := range holders {
		if len(l.ids[h.ID()]) > 0 {
			made = append(made, h)
		} else {
			rest = append(rest, h)
		}
	}
	// On each NIC, each holder before the next by ID there.
	next := make([][]int, len(made))
	waits := make([]int, len(made))
	byNIC := map[string][]int{}
	for i, h := range made {
		for nic := range l.ids[h.ID()] {
			byNIC[nic] = append(byNIC[nic], i)
		}
	}
	for nic, is := range byNIC {
		slices.SortStableFunc(is, func(a, b int) int { return cmp.Compare(l.ids[made[a].ID()][nic], l.ids[made[b].ID()][nic]) })
		for k := 1; k < len(is); k++ {
			next[is[k-1]] = append(next[is[k-1]], is[k])
			waits[is[k]]++
		}
	}
	out := make([]checkpoint.Holder, 0, len(holders))
	done := make([]bool, len(made))
	pick := func(free bool) int {
		p := -1
		for i := range made {
			if !done[i] && (!free || waits[i] <= 0) && (p < 0 || l.lowest(made[i].ID()) < l.lowest(made[p].ID())) {
				p = i
			}
		}
		return p
	}
	for range made {
		p := pick(true)
		if p < 0 {
			p = pick(false)
		}
		done[p] = true
		for _, j := range next[p] {
			waits[j]--
		}
		out = append(out, made[p])
	}
	copy(holders, append(out, rest...))
}

// Revival is what [Engine.Revive] did with a live holder's services.
type Revival int

// The outcomes of a revival.
const (
	// Kept: the services admit nobody or a fallback member, and stay so
	// (those lost are made again).
	Kept Revival = iota
	// Held: the namespace they admit is verified as the holder's and held
	// again; those lost are made again and bound to it.
	Held
	// Unheld: the namespace could not be verified; every service admits
	// nobody now, until the holder's next bind.
	Unheld
)

// Revive brings a live holder's services back at a start, on nics. A
// service names its member by inode, and after a reboot, or a sandbox
// made again while the agent was down, that inode may belong to another
// pod's namespace by now: the services are trusted only once open, which
// opens the holder's namespace as the runtime knows it now, finds the
// recorded inode there, or the holder's pin still holds it (then no other
// namespace can have it). Then the namespace is held again and services
// the driver lost are made again and bound to it. Otherwise every service
// is made unbound, told on the holder's pod, and its next bind binds them
// to the namespace it has then. Doubt unbinds; it never destroys a
// record. The caller holds id's lock.
func (e *Engine) Revive(ctx context.Context, id string, nics []string, open func() (Handle, error), fallback *cxi.Member) (Revival, []checkpoint.Service, error) {
	h, ok := e.store.Get(id)
	if !ok {
		return Kept, nil, nil
	}
	if h.Netns == 0 {
		created, err := e.Ensure(ctx, id, nics, fallback)
		return Kept, created, err
	}
	if ns, ok := e.verify(h, open); ok {
		created, err := e.Ensure(ctx, id, nics, nil)
		if err != nil {
			_ = ns.Close()
			return Held, created, err
		}
		_, err = e.Bind(ctx, id, ns, nil)
		return Held, created, err
	}
	err := e.Unbind(ctx, id, 0)
	if err != nil {
		e.events.Record(event.Node(e.node), event.UnbindFailed,
			fmt.Sprintf("%s: its services admit network namespace %d, which could not be verified as its own since the agent started, and unbinding them failed: %v", h.String(), h.Netns, err))
		return Unheld, nil, err
	}
	created, err := e.Ensure(ctx, id, nics, nil)
	e.events.Record(e.subject(h), event.ServicesUnbound,
		fmt.Sprintf("The services of %s admitted network namespace %d, which could not be verified as its own after the agent restarted", h.String(), h.Netns))
	return Unheld, created, err
}

// verify returns the holder's namespace, held, when it is the one its
// record names: the runtime says so, or, where the runtime cannot answer,
// the holder's pin still holds that inode (it was held all along, so no
// other namespace can have it). A runtime that names another namespace
// means the sandbox was made again: not verified.
func (e *Engine) verify(h checkpoint.Holder, open func() (Handle, error)) (Handle, bool) {
	ns, err := open()
	if err == nil {
		if ns.Inode() == h.Netns {
			return ns, true
		}
		e.log.Warn("a live holder's network namespace is not the one its services admit (its sandbox was made again)", "holder", h.String(), "netns", h.Netns, "now", ns.Inode())
		_ = ns.Close()
		return nil, false
	}
	pinned, perr := e.ns.Pinned(h.ID())
	if perr == nil && pinned.Inode() == h.Netns {
		e.log.Info("a live holder's namespace is not known to the runtime, but its pin holds it: its services stay bound", "holder", h.String(), "netns", h.Netns, "err", err)
		return pinned, true
	}
	if perr == nil {
		_ = pinned.Close()
	}
	e.log.Warn("a live holder's namespace cannot be verified; its services are made unbound", "holder", h.String(), "netns", h.Netns, "err", err)
	return nil, false
}

// OrphanRules say what a start-up reconcile may destroy of the services
// no record names.
type OrphanRules struct {
	// Lo and Hi bound the VNIs the agent leases: an unbound service no
	// record names with VNIs in range is a create that crashed before its
	// record was written.
	Lo, Hi uint16
	// CleanManaged destroys every other non-system service in range too.
	CleanManaged bool
}

// OrphanReport counts what [Engine.Orphans] did.
type OrphanReport struct{ Adopted, Destroyed, Foreign int }

// Orphans handles, at start, the services no record names: one admitting
// the namespace a live holder's record names, on its VNI, is a bind that
// crashed before its record was written, and is adopted (alive says which
// holders live); one of a holder that is gone is destroyed, as is an
// unbound one in range (a create that crashed) and, under CleanManaged,
// every other non-system service in range. The rest is someone else's.
func (e *Engine) Orphans(ctx context.Context, rules OrphanRules, alive func(checkpoint.Holder) bool) (OrphanReport, error) {
	var rep OrphanReport
	driver, err := e.fab.ListAll(ctx)
	if err != nil {
		return rep, err
	}
	owned := map[string]bool{}
	for _, h := range e.store.All() {
		for _, s := range h.Services {
			owned[fmt.Sprintf("%s/%d", s.NIC, s.ID)] = true
		}
	}
	inRange := func(vnis []uint16) bool {
		return len(vnis) > 0 && !slices.ContainsFunc(vnis, func(v uint16) bool { return v < rules.Lo || v > rules.Hi })
	}
	for _, nic := range slices.Sorted(maps.Keys(driver)) {
		for _, svc := range driver[nic] {
			if owned[fmt.Sprintf("%s/%d", nic, svc.ID)] || svc.IsDefault() || svc.System {
				continue
			}
			h, recognised := e.recognise(svc)
			switch {
			case recognised && alive(h):
				if e.adopt(h.ID(), nic, svc) {
					rep.Adopted++
				}
				continue
			case recognised, Unbound(svc) && inRange(svc.VNIs), rules.CleanManaged && inRange(svc.VNIs):
			default:
				rep.Foreign++
				continue
			}
			if err := e.fab.Destroy(ctx, nic, svc.ID); err != nil {
				e.log.Error("destroy an orphan service", "nic", nic, "id", svc.ID, "err", err)
				continue
			}
			rep.Destroyed++
			e.log.Info("destroyed an orphan service", "nic", nic, "id", svc.ID, "vnis", svc.VNIs)
		}
	}
	return rep, e.Save()
}

// recognise finds the holder a service was made for by a bind that
// crashed before recording it: its VNI, and the namespace its record
// names as the member.
func (e *Engine) recognise(svc cxi.Service) (checkpoint.Holder, bool) {
	for _, h := range e.store.All() {
		if h.Netns == 0 || !slices.Contains(svc.VNIs, h.VNI) {
			continue
		}
		if slices.Contains(svc.Members, cxi.Member{Type: cxi.MemberNetNS, ID: h.Netns}) {
			return h, true
		}
	}
	return checkpoint.Holder{}, false
}

func (e *Engine) adopt(id, nic string, svc cxi.Service) bool {
	unlock := e.Lock(id)
	defer unlock()
	h, err := e.Update(id, func(r *checkpoint.Holder) {
		r.Services = append(r.Services, checkpoint.Service{NIC: nic, ID: svc.ID, VNIs: slices.Clone(svc.VNIs), Netns: r.Netns})
	})
	if err != nil {
		e.log.Error("adopt a service from an interrupted bind; it stays on the driver, unrecorded", "holder", id, "nic", nic, "id", svc.ID, "err", err)
		return false
	}
	e.log.Info("adopted a service from an interrupted bind", "holder", h.String(), "nic", nic, "id", svc.ID)
	return true
}

// DropStalePins drops the pins of holders no longer recorded, or whose
// services admit no namespace: they hold namespaces for nothing.
func (e *Engine) DropStalePins() {
	if err := e.ns.Unpin(func(id string) bool {
		h, ok := e.store.Get(id)
		return ok && h.Netns != 0 && len(h.Services) > 0
	}); err != nil {
		e.log.Warn("drop the pins of namespaces no service admits", "err", err)
	}
}

// Pending are the holders whose teardown began (Exited set) and whose
// services are not all destroyed yet: what the drain watch waits on.
func (e *Engine) Pending() []checkpoint.Holder {
	var out []checkpoint.Holder
	for _, h := range e.store.All() {
		if h.Exited != nil && len(h.Services) > 0 {
			out = append(out, h)
		}
	}
	return out
}

// InUseVNIs returns every VNI this node uses, for the controller's
// heartbeat: those the record names and those of every service on the
// NICs (the agent's own and any other). The controller drops the node's
// hold on a lease whose VNI this lacks, so it fails rather than answer in
// part when a NIC's services cannot be listed. The record is read before
// the driver: a holder torn down in between is still named by it.
func (e *Engine) InUseVNIs(ctx context.Context) ([]uint16, error) {
	set := map[uint16]bool{}
	for _, h := range e.store.All() {
		if h.VNI != 0 {
			set[h.VNI] = true
		}
	}
	driver, err := e.fab.ListAll(ctx)
	if err != nil {
		return nil, err
	}
	for _, svcs := range driver {
		for _, s := range svcs {
			for _, v := range s.VNIs {
				set[v] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

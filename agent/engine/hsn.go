package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// AddressAllocator is what a holder's hsn interfaces need of the node's
// IPAM; *ipam.Allocator is one.
type AddressAllocator interface {
	Allocate(ctx context.Context, req ipam.Request) (ipam.Allocation, netip.Prefix, error)
	Release(owner string) (bool, error)
	Owners(prefix string) []string
}

// Linker puts a holder's hsn interfaces into the namespace the engine
// holds and takes them out again; NetlinkLinker is one.
type Linker interface {
	// Attach returns the interface's hardware address.
	Attach(ns Handle, s hsnlink.Spec) (net.HardwareAddr, error)
	Detach(ns Handle, name string) error
}

// NetlinkLinker is package hsnlink over the held namespace's descriptor.
type NetlinkLinker struct{}

func (NetlinkLinker) Attach(h Handle, s hsnlink.Spec) (net.HardwareAddr, error) {
	ns, err := nsDescriptor(h)
	if err != nil {
		return nil, err
	}
	return hsnlink.Attach(ns, s)
}

func (NetlinkLinker) Detach(h Handle, name string) error {
	ns, err := nsDescriptor(h)
	if err != nil {
		return err
	}
	return hsnlink.Detach(ns, name)
}

func nsDescriptor(h Handle) (hsnlink.Namespace, error) {
	ns, ok := h.(hsnlink.Namespace)
	if !ok {
		return nil, fmt.Errorf("network namespace %d is held without a descriptor", h.Inode())
	}
	return ns, nil
}

// HSNPolicy is how a front end's holders get their hsn interfaces.
type HSNPolicy struct {
	Mode hsnlink.Mode
	// Name is the first interface's name in the pod; the next rails'
	// count up from its number: hsn0, hsn1, ...
	Name string
	// Pool is the controller's IP pool the addresses come from, where
	// PoolByNetdev names none for the rail's netdev.
	Pool         string
	PoolByNetdev map[string]string
	MTU          int
	// AllNICs gives the pod an interface on every NIC it holds that has
	// an hsn netdev (multi-rail); otherwise on its first only.
	AllNICs bool
}

// Rail is one NIC of a holder and its host hsn netdev ("": none).
type Rail struct{ NIC, Netdev string }

// HSNRequest is what a holder's hsn interfaces are made of.
type HSNRequest struct {
	Policy HSNPolicy
	// Rails are the holder's NICs in the order SLINGSHOT_DEVICES names
	// them: the interfaces are numbered in that order.
	Rails []Rail
	// Want is the pod's network request (its slingshot.hpe.com/network
	// annotation); it shapes the first interface.
	Want netreq.Request
	// Pod names the pod, for the allocator's inspection.
	Pod string
	// FirstIndex numbers the holder's first interface: a pod's interfaces
	// of its other holders (claims) come before.
	FirstIndex int
}

// ErrAddressRefused marks an hsn address the allocator refused: the
// front end's event says so.
var ErrAddressRefused = errors.New("hsn address refused")

// hsnOwnerPrefix keys the addresses of a holder's hsn interfaces at the
// allocator: "pod/<uid>/" or "claim/<uid>/", then the interface name.
func hsnOwnerPrefix(h checkpoint.Holder) string {
	return string(h.Kind) + "/" + h.UID + "/"
}

// EnsureHSN gives holder id an interface on each of its rails that the
// policy asks for, in the namespace held by ns: each address is
// allocated and recorded (saved) before its interface is made.
// Idempotent: a restarted container finds the same addresses and
// interfaces, and a rail added by another container gets the next name.
func (e *Engine) EnsureHSN(ctx context.Context, id string, ns Handle, req HSNRequest) error {
	if e.addrs == nil {
		return fmt.Errorf("hsn interface for %s: the agent has no address allocator", id)
	}
	if ns == nil {
		return fmt.Errorf("hsn interface for %s: the pod's network namespace is not known (a fallback UID/GID member has none)", id)
	}
	h, ok := e.store.Get(id)
	if !ok {
		return fmt.Errorf("hsn interface for %s: no record", id)
	}
	if h.UID == "" {
		return fmt.Errorf("hsn interface for %s: the pod's UID is not known", id)
	}
	rails, err := railsOf(req)
	if err != nil {
		return fmt.Errorf("pod %s: %w", h.Key(), err)
	}
	links := h.HSNLinks()
	added := false
	for _, r := range rails {
		if linkOn(links, r.Netdev) {
			continue
		}
		l, err := e.allocateHSN(ctx, h, req, r, req.FirstIndex+len(links))
		if err != nil {
			return err
		}
		links = append(links, l)
		added = true
	}
	if added {
		// Recorded before any interface carries an address.
		if _, err := e.Update(id, func(p *checkpoint.Holder) { p.SetHSNLinks(links) }); err != nil {
			return err
		}
		if err := e.store.Save(); err != nil {
			return err
		}
	}
	changed := false
	for i, l := range links {
		mac, err := e.linker.Attach(ns, specOf(l))
		if err != nil {
			e.hsnError("attach")
			return fmt.Errorf("hsn interface %s for %s: %w", l.Name, h.Key(), err)
		}
		if mac.String() != l.HardwareAddr {
			links[i].HardwareAddr, changed = mac.String(), true
		}
	}
	if changed {
		// Only what the claim's status shows: no save of its own.
		if _, err := e.Update(id, func(p *checkpoint.Holder) { p.SetHSNLinks(links) }); err != nil {
			return err
		}
	}
	return nil
}

// railsOf are the rails that get an interface: the one the pod names,
// else the first with a netdev, or all with one when the policy says so.
func railsOf(req HSNRequest) ([]Rail, error) {
	var have, out []string
	var rails []Rail
	for _, r := range req.Rails {
		if r.Netdev == "" {
			continue
		}
		have = append(have, r.NIC+" ("+r.Netdev+")")
		switch {
		case req.Want.NetDev != "":
			if r.Netdev == req.Want.NetDev {
				return []Rail{r}, nil
			}
		case req.Policy.AllNICs || len(rails) == 0:
			rails = append(rails, r)
		}
	}
	if req.Want.NetDev != "" {
		return nil, fmt.Errorf("the pod asks for netdev %s, which none of its NICs has: %s", req.Want.NetDev, strings.Join(have, ", "))
	}
	if len(rails) == 0 {
		for _, r := range req.Rails {
			out = append(out, r.NIC)
		}
		return nil, fmt.Errorf("none of its NICs (%s) has an hsn netdev", strings.Join(out, ", "))
	}
	return rails, nil
}

func linkOn(links []checkpoint.HSNLink, netdev string) bool {
	for _, l := range links {
		if l.Parent == netdev {
			return true
		}
	}
	return false
}

// allocateHSN chooses the name and address of the holder's index-th
// interface, on rail r. The pod's request shapes the first only: the
// name, pool, subnet or address it asks for is one interface's.
func (e *Engine) allocateHSN(ctx context.Context, h checkpoint.Holder, req HSNRequest, r Rail, index int) (checkpoint.HSNLink, error) {
	pol := req.Policy
	base := pol.Name
	if req.Want.Interface != "" {
		base = req.Want.Interface
	}
	name := railName(base, index)
	pool := pol.Pool
	if p, ok := pol.PoolByNetdev[r.Netdev]; ok {
		pool = p
	}
	var want netreq.Request
	if index == 0 {
		want = req.Want
		if want.Pool != "" {
			pool = "" // the pod's own pool; the allocator checks it exists
		}
	}
	owner := hsnOwnerPrefix(h) + name
	al, pfx, err := e.addrs.Allocate(ctx, ipam.Request{Owner: owner, Pool: pool, Pod: req.Pod, Want: want})
	if err != nil {
		e.hsnError("allocate")
		return checkpoint.HSNLink{}, fmt.Errorf("%w for %s: %w", ErrAddressRefused, h.Key(), err)
	}
	e.log.Info("hsn address allocated", "holder", h.Key(), "pool", al.Pool, "address", pfx, "parent", r.Netdev, "interface", name)
	return checkpoint.HSNLink{Name: name, Parent: r.Netdev, Mode: pol.Mode.String(), Address: pfx, Owner: owner, MTU: pol.MTU}, nil
}

// railName is the index-th interface's name counted from base: hsn0,
// then hsn1; a base without a number gets one from the second on (hsn,
// hsn1).
func railName(base string, index int) string {
	if index == 0 {
		return base
	}
	stem := strings.TrimRight(base, "0123456789")
	n, _ := strconv.Atoi(base[len(stem):]) // "" is 0
	return stem + strconv.Itoa(n+index)
}

// specOf is the interface a record describes.
func specOf(l checkpoint.HSNLink) hsnlink.Spec {
	return hsnlink.Spec{Parent: l.Parent, Name: l.Name, Mode: modeOf(l.Mode), Address: l.Address, MTU: l.MTU}
}

// modeOf reads a mode as configured or recorded: macvlan unless ipvlan.
func modeOf(s string) hsnlink.Mode {
	if s == hsnlink.IPVLAN.String() {
		return hsnlink.IPVLAN
	}
	return hsnlink.Macvlan
}

// LeaveOldNamespace takes holder id's hsn interfaces out of the namespace
// its services admit, held still, when ns is another (the sandbox was
// made again): the old one must not carry the addresses beside the new.
func (e *Engine) LeaveOldNamespace(id string, ns Handle) {
	h, _ := e.store.Get(id)
	old := e.ns.Get(id)
	if old == nil || ns == nil || old.Inode() == ns.Inode() {
		return
	}
	for _, l := range h.HSNLinks() {
		if err := e.linker.Detach(old, l.Name); err != nil {
			e.log.Warn("remove an hsn interface from a holder's old namespace", "holder", h.Key(), "interface", l.Name, "err", err)
		}
	}
}

// DropHSN takes holder id's hsn interfaces out of its held namespace
// (none held: they went with it), then releases their addresses: the
// interfaces go first, so that an address is never handed out while an
// interface carries it. It reports whether nothing of them is left.
func (e *Engine) DropHSN(id string) bool {
	h, ok := e.store.Get(id)
	if !ok || e.addrs == nil {
		return true
	}
	if ns := e.ns.Get(id); ns != nil {
		for _, l := range h.HSNLinks() {
			if err := e.linker.Detach(ns, l.Name); err != nil {
				if !errors.Is(err, hsnlink.ErrMismatch) {
					e.hsnError("detach")
					e.log.Warn("remove a holder's hsn interface; will retry", "holder", h.Key(), "interface", l.Name, "err", err)
					return false
				}
				// Another kind of link took the name: not ours to delete,
				// and it does not carry our address.
				e.log.Warn("the hsn interface name is another link's; leaving it", "holder", h.Key(), "err", err)
			}
		}
	}
	// Every address of the holder: the recorded ones, and one a bind that
	// crashed before recording it may have left. An hsn interface is only
	// ever made for a holder whose UID is known, and is keyed by it.
	if h.UID != "" {
		for _, owner := range e.addrs.Owners(hsnOwnerPrefix(h)) {
			if _, err := e.addrs.Release(owner); err != nil {
				e.hsnError("release")
				e.log.Warn("release a holder's hsn address; will retry", "holder", h.Key(), "owner", owner, "err", err)
				return false
			}
		}
	}
	if len(h.HSNLinks()) > 0 {
		if _, err := e.Update(id, func(p *checkpoint.Holder) { p.SetHSNLinks(nil) }); err != nil {
			e.log.Error("drop released hsn addresses from the record; will retry", "holder", h.Key(), "err", err)
			return false
		}
	}
	return true
}

// ReconcileHSN runs at start, after the live holders' namespaces are held
// again: it attaches again the interfaces of live holders (idempotent; a
// namespace that lost one gets it back), and releases the addresses of
// holders the record no longer has, left by a bind that crashed between
// allocating and recording.
func (e *Engine) ReconcileHSN() {
	if e.addrs == nil {
		return
	}
	recorded := map[string]bool{} // owner prefixes
	for _, h := range e.store.All() {
		if h.UID != "" {
			recorded[hsnOwnerPrefix(h)] = true
		}
		ns := e.ns.Get(h.ID())
		if ns == nil || h.Exited != nil {
			continue
		}
		for _, l := range h.HSNLinks() {
			if _, err := e.linker.Attach(ns, specOf(l)); err != nil {
				e.hsnError("attach")
				e.log.Warn("a live holder's hsn interface could not be restored", "holder", h.Key(), "interface", l.Name, "err", err)
				e.events.Record(e.subject(h), event.HSNRestoreFailed,
					fmt.Sprintf("%s: hsn interface %s (%s on %s): %v", h.String(), l.Name, l.Address, l.Parent, err))
			}
		}
	}
	for _, kind := range []checkpoint.Kind{checkpoint.KindPod, checkpoint.KindClaim} {
		for _, owner := range e.addrs.Owners(string(kind) + "/") {
			uid, _, _ := strings.Cut(strings.TrimPrefix(owner, string(kind)+"/"), "/")
			if recorded[string(kind)+"/"+uid+"/"] {
				continue
			}
			if _, err := e.addrs.Release(owner); err != nil {
				e.log.Warn("release the hsn address of an unrecorded holder", "owner", owner, "err", err)
				continue
			}
			e.log.Info("released the hsn address of a bind that did not finish", "owner", owner)
		}
	}
}

func (e *Engine) hsnError(op string) {
	if e.hsnErrors != nil {
		e.hsnErrors.WithLabelValues(op).Inc()
	}
}

// HSNPolicyOf is the policy a configured hsn interface asks for.
func HSNPolicyOf(c config.HSNInterface) HSNPolicy {
	return HSNPolicy{Mode: modeOf(c.Mode), Name: c.Name, Pool: c.Pool, PoolByNetdev: c.PoolByNetdev, MTU: c.MTU, AllNICs: c.AllNICs}
}

package devplugin

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// AddressAllocator is what the pod path needs of the node's IPAM;
// *ipam.Allocator is one.
type AddressAllocator interface {
	Allocate(ctx context.Context, req ipam.Request) (ipam.Allocation, netip.Prefix, error)
	Release(owner string) (bool, error)
	Owners(prefix string) []string
}

// HSNLinker puts a pod's hsn interface into the namespace the agent holds
// and takes it out again; NetlinkHSN is one.
type HSNLinker interface {
	Attach(ns nsHandle, s hsnlink.Spec) error
	Detach(ns nsHandle, name string) error
}

// NetlinkHSN is package hsnlink over the held namespace's descriptor.
type NetlinkHSN struct{}

func (NetlinkHSN) Attach(h nsHandle, s hsnlink.Spec) error {
	ns, err := nsDescriptor(h)
	if err != nil {
		return err
	}
	return hsnlink.Attach(ns, s)
}

func (NetlinkHSN) Detach(h nsHandle, name string) error {
	ns, err := nsDescriptor(h)
	if err != nil {
		return err
	}
	return hsnlink.Detach(ns, name)
}

func nsDescriptor(h nsHandle) (hsnlink.Namespace, error) {
	ns, ok := h.(hsnlink.Namespace)
	if !ok {
		return nil, fmt.Errorf("network namespace %d is held without a descriptor", h.Inode())
	}
	return ns, nil
}

// hsnPolicy is a resource's hsn interface configuration.
type hsnPolicy struct {
	mode hsnlink.Mode
	name string
	pool string
	mtu  int
}

// hsnOwnerPrefix keys the addresses of a pod's hsn interfaces at the
// allocator: "pod/<uid>/", then the interface name.
func hsnOwnerPrefix(uid string) string { return "pod/" + uid + "/" }

// ensureHSN gives the pod an interface on its NIC's hsn netdev when the
// resource asks for one: it parses the pod's network request, allocates
// the address (recorded before it is handed out), records the interface
// and attaches it in the pod's namespace, held by h. Idempotent: a
// restarted container finds the same address and interface.
func (b *binder) ensureHSN(ctx context.Context, key, resource string, pod *podwatch.Pod, nics []*nic, h nsHandle) error {
	hp, ok := b.policy().hsn[resource]
	if !ok {
		return nil
	}
	if b.addrs == nil {
		return fmt.Errorf("hsn interface for %s: the agent has no address allocator", key)
	}
	if h == nil {
		return fmt.Errorf("hsn interface for %s: the pod's network namespace is not known (a fallback UID/GID member has none)", key)
	}
	entry, _ := b.eng.Get(key)
	link := entry.HSN
	if link == nil {
		var err error
		if link, err = b.allocateHSN(ctx, entry, pod, hp, nics); err != nil {
			return err
		}
		if _, err := b.eng.Update(key, func(p *checkpoint.Holder) { p.HSN = link }); err != nil {
			return err
		}
		if err := b.eng.Save(); err != nil {
			return err
		}
	}
	if err := b.linker.Attach(h, specOf(link)); err != nil {
		b.metrics.HSNErrors.WithLabelValues("attach").Inc()
		return fmt.Errorf("hsn interface for %s: %w", key, err)
	}
	return nil
}

// leaveOldNamespace takes the pod's hsn interface out of the namespace
// its services admit, held still, when h is another (the sandbox was made
// again): the old one must not carry the address beside the new one.
func (b *binder) leaveOldNamespace(key string, h nsHandle) {
	entry, _ := b.eng.Get(key)
	old := b.eng.Namespaces().Get(key)
	if entry.HSN == nil || old == nil || old.Inode() == h.Inode() {
		return
	}
	if err := b.linker.Detach(old, entry.HSN.Name); err != nil {
		b.logger.Warn("remove the hsn interface from a pod's old namespace", "pod", key, "err", err)
	}
}

// errAddressRefused marks a bind refused because the pod's hsn address
// could not be allocated: its event says so (event.AddressRefused).
var errAddressRefused = errors.New("hsn address refused")

// allocateHSN chooses the pod's hsn netdev, interface name and address.
func (b *binder) allocateHSN(ctx context.Context, entry checkpoint.Holder, pod *podwatch.Pod, hp hsnPolicy, nics []*nic) (*checkpoint.HSNLink, error) {
	key := entry.Key()
	var want netreq.Request
	if entry.Network != "" {
		var err error
		if want, err = netreq.Parse(entry.Network); err != nil {
			return nil, fmt.Errorf("pod %s, annotation %s: %w", key, netreq.Annotation, err)
		}
	}
	parent, err := hsnParent(nics, want.NetDev)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", key, err)
	}
	name := hp.name
	if want.Interface != "" {
		name = want.Interface
	}
	pool := hp.pool
	if want.Pool != "" {
		pool = "" // the pod's own pool; the allocator checks it exists
	}
	owner := hsnOwnerPrefix(pod.UID) + name
	al, pfx, err := b.addrs.Allocate(ctx, ipam.Request{Owner: owner, Pool: pool, Pod: key, Want: want})
	if err != nil {
		b.metrics.HSNErrors.WithLabelValues("allocate").Inc()
		return nil, fmt.Errorf("%w for %s: %w", errAddressRefused, key, err)
	}
	b.logger.Info("hsn address allocated", "pod", key, "pool", al.Pool, "address", pfx, "parent", parent, "interface", name)
	return &checkpoint.HSNLink{Name: name, Parent: parent, Mode: hp.mode.String(), Address: pfx, Owner: owner, MTU: hp.mtu}, nil
}

// specOf is the interface a record describes.
func specOf(l *checkpoint.HSNLink) hsnlink.Spec {
	return hsnlink.Spec{Parent: l.Parent, Name: l.Name, Mode: modeOf(l.Mode), Address: l.Address, MTU: l.MTU}
}

// hsnParent is the hsn netdev the interface sits on: the one the pod
// asks for, which must be one of its NICs', else its first NIC's.
func hsnParent(nics []*nic, want string) (string, error) {
	var have []string
	for _, n := range nics {
		if n.netdev == "" {
			continue
		}
		if want == "" || n.netdev == want {
			return n.netdev, nil
		}
		have = append(have, n.name+" ("+n.netdev+")")
	}
	if want != "" {
		return "", fmt.Errorf("the pod asks for netdev %s, which none of its NICs has: %s", want, strings.Join(have, ", "))
	}
	return "", fmt.Errorf("none of its NICs (%s) has an hsn netdev", strings.Join(nicNames(nics), ", "))
}

func modeOf(s string) hsnlink.Mode {
	if s == hsnlink.IPVLAN.String() {
		return hsnlink.IPVLAN
	}
	return hsnlink.Macvlan
}

// dropHSN takes the pod's hsn interface out of its namespace h, where that
// is still held (nil: not held), then releases its addresses; the interface goes first,
// so that the address is never handed out while an interface carries it.
// It reports whether nothing of it is left.
func (b *binder) dropHSN(key string, h nsHandle) bool {
	entry, ok := b.eng.Get(key)
	if !ok || b.addrs == nil {
		return true
	}
	if link := entry.HSN; link != nil {
		if h != nil {
			if err := b.linker.Detach(h, link.Name); err != nil {
				if !errors.Is(err, hsnlink.ErrMismatch) {
					b.metrics.HSNErrors.WithLabelValues("detach").Inc()
					b.logger.Warn("remove a pod's hsn interface; will retry", "pod", key, "interface", link.Name, "err", err)
					return false
				}
				// Another kind of link took the name: not ours to delete,
				// and it does not carry our address.
				b.logger.Warn("the pod's hsn interface name is another link's; leaving it", "pod", key, "err", err)
			}
		}
	}
	// Every address of the pod: the recorded one, and one a bind that
	// crashed before recording it may have left. An hsn interface is only
	// ever made for a pod whose UID is known, and is keyed by it.
	var owners []string
	if entry.UID != "" {
		owners = b.addrs.Owners(hsnOwnerPrefix(entry.UID))
	}
	for _, owner := range owners {
		if _, err := b.addrs.Release(owner); err != nil {
			b.metrics.HSNErrors.WithLabelValues("release").Inc()
			b.logger.Warn("release a pod's hsn address; will retry", "pod", key, "owner", owner, "err", err)
			return false
		}
	}
	if entry.HSN != nil {
		if _, err := b.eng.Update(key, func(p *checkpoint.Holder) { p.HSN = nil }); err != nil {
			b.logger.Error("drop a released hsn address from the record; will retry", "pod", key, "err", err)
			return false
		}
	}
	return true
}

// reconcileHSN runs at start, after the live pods' namespaces are held
// again: it attaches again the interfaces of live pods (idempotent; a
// namespace that lost its interface gets it back), and releases the
// addresses of pods the record no longer has, left by a bind that crashed
// between allocating and recording.
func (b *binder) reconcileHSN() {
	if b.addrs == nil {
		return
	}
	recorded := map[string]bool{} // pod UIDs
	for _, entry := range b.eng.Holders(checkpoint.KindPod) {
		if entry.UID != "" {
			recorded[entry.UID] = true
		}
		h := b.eng.Namespaces().Get(entry.ID())
		if entry.HSN == nil || h == nil || entry.Exited != nil {
			continue
		}
		if err := b.linker.Attach(h, specOf(entry.HSN)); err != nil {
			b.metrics.HSNErrors.WithLabelValues("attach").Inc()
			b.logger.Warn("a live pod's hsn interface could not be restored", "pod", entry.Key(), "err", err)
		}
	}
	for _, owner := range b.addrs.Owners("pod/") {
		uid, _, _ := strings.Cut(strings.TrimPrefix(owner, "pod/"), "/")
		if recorded[uid] {
			continue
		}
		if _, err := b.addrs.Release(owner); err != nil {
			b.logger.Warn("release the hsn address of an unrecorded pod", "owner", owner, "err", err)
			continue
		}
		b.logger.Info("released the hsn address of a bind that did not finish", "owner", owner)
	}
}

package hsnlink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attach is [Attach] on the namespace of fd, s normalized.
func attach(fd int, s Spec) (net.HardwareAddr, error) {
	l, err := open(fd)
	if err != nil {
		return nil, err
	}
	defer l.close()
	parent, err := l.parent(s.Parent)
	if err != nil {
		return nil, err
	}
	existing, err := l.pod.LinkByName(s.Name)
	switch {
	case err == nil:
		return existing.Attrs().HardwareAddr, l.adopt(existing, parent, s)
	case !isNotFound(err):
		return nil, fmt.Errorf("look up %s: %w", s.Name, err)
	}
	child, err := l.create(fd, parent, s)
	if err != nil {
		return nil, err
	}
	if err := l.configure(child, s); err != nil {
		return nil, l.undo(child, err)
	}
	return child.Attrs().HardwareAddr, nil
}

// create makes the child of parent inside the pod's namespace under a
// temporary name and renames it to s.Name. Creating it there, rather than
// in the host's namespace and moving it, leaves no moment at which a crash
// would strand it on the host; the temporary name keeps the making clear
// of any name in the host's namespace, which some kernels checked.
func (l *links) create(fd int, parent netlink.Link, s Spec) (netlink.Link, error) {
	tmp, err := tempName()
	if err != nil {
		return nil, err
	}
	attrs := netlink.LinkAttrs{
		Name:        tmp,
		ParentIndex: parent.Attrs().Index,
		MTU:         s.MTU,
		Namespace:   netlink.NsFd(fd),
	}
	var child netlink.Link = &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if s.Mode == IPVLAN {
		child = &netlink.IPVlan{LinkAttrs: attrs, Mode: netlink.IPVLAN_MODE_L2}
	}
	if err := l.host.LinkAdd(child); err != nil {
		// rtnetlink answers EOPNOTSUPP for a link kind no module provides.
		if errors.Is(err, unix.EOPNOTSUPP) {
			msg := fmt.Sprintf("the kernel has no %s support (no %s module): %v", s.Mode, s.Mode, err)
			return nil, &twoErrors{msg: msg, kind: ErrNotSupported, cause: err}
		}
		return nil, fmt.Errorf("create %s %s on %s: %w", s.Mode, tmp, s.Parent, err)
	}
	made, err := l.pod.LinkByName(tmp)
	if err != nil {
		// Not on the host: it dies with the pod's namespace.
		return nil, fmt.Errorf("find %s %s just made in the pod's namespace: %w", s.Mode, tmp, err)
	}
	if err := l.pod.LinkSetName(made, s.Name); err != nil {
		return nil, l.undo(made, fmt.Errorf("rename %s to %s: %w", tmp, s.Name, err))
	}
	made.Attrs().Name = s.Name
	return made, nil
}

// configure gives the new child its address and sets it up.
func (l *links) configure(child netlink.Link, s Spec) error {
	if err := l.addAddress(child, s); err != nil {
		return err
	}
	if err := l.pod.LinkSetUp(child); err != nil {
		return fmt.Errorf("set %s up: %w", s.Name, err)
	}
	return nil
}

func (l *links) addAddress(link netlink.Link, s Spec) error {
	a := s.Address.Addr()
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   a.AsSlice(),
		Mask: net.CIDRMask(s.Address.Bits(), a.BitLen()),
	}}
	if a.Is6() {
		// The address is the allocator's, unique by construction: no
		// duplicate detection to wait for before the pod may use it.
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := l.pod.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add address %s to %s: %w", s.Address, s.Name, err)
	}
	return nil
}

// undo deletes the child made when a later step failed with err, and
// returns err, joined with the deletion's error if that failed too.
func (l *links) undo(child netlink.Link, err error) error {
	if derr := l.pod.LinkDel(child); derr != nil && !isNotFound(derr) {
		return errors.Join(err, fmt.Errorf("delete %s made in the pod's namespace: %w", child.Attrs().Name, derr))
	}
	return err
}

// adopt makes an existing link of the name the one asked for, if it is of
// the kind, mode and parent asked for and carries no other address.
func (l *links) adopt(existing, parent netlink.Link, s Spec) error {
	o, err := l.observe(existing, s)
	if err != nil {
		return err
	}
	if d := identityDiffs(o, s, parent.Attrs().Index); d != nil {
		return fmt.Errorf("%w: existing %s: %s", ErrMismatch, s.Name, strings.Join(d, "; "))
	}
	switch diff, none := addressDiff(o, s); {
	case none:
		// A crash between the making and the address: finish it.
		if err := l.addAddress(existing, s); err != nil {
			return err
		}
	case diff != "":
		return fmt.Errorf("%w: existing %s: %s", ErrMismatch, s.Name, diff)
	}
	if !o.up {
		if err := l.pod.LinkSetUp(existing); err != nil {
			return fmt.Errorf("set existing %s up: %w", s.Name, err)
		}
	}
	return nil
}

// observe reads what link is, for the comparisons of compare.go.
func (l *links) observe(link netlink.Link, s Spec) (observed, error) {
	a := link.Attrs()
	o := observed{
		kind:   link.Type(),
		parent: a.ParentIndex,
		up:     a.Flags&net.FlagUp != 0,
		mtu:    a.MTU,
	}
	switch c := link.(type) {
	case *netlink.Macvlan:
		o.mode = macvlanMode(c.Mode)
	case *netlink.IPVlan:
		o.mode = ipvlanMode(c.Mode)
	}
	family := netlink.FAMILY_V4
	if s.Address.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := l.addrList(link, family)
	if err != nil {
		return o, fmt.Errorf("addresses of %s: %w", a.Name, err)
	}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok || ip.Unmap().IsLinkLocalUnicast() {
			continue // fe80:: is the kernel's, not the allocator's
		}
		bits, _ := ad.Mask.Size()
		o.addrs = append(o.addrs, netip.PrefixFrom(ip.Unmap(), bits))
	}
	return o, nil
}

// dumpTries bounds the retries of a dump the kernel interrupted because
// the addresses changed while it was read.
const dumpTries = 3

func (l *links) addrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	var err error
	for range dumpTries {
		var addrs []netlink.Addr
		addrs, err = l.pod.AddrList(link, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return addrs, err
		}
	}
	return nil, err
}

func macvlanMode(m netlink.MacvlanMode) string {
	switch m {
	case netlink.MACVLAN_MODE_PRIVATE:
		return "private"
	case netlink.MACVLAN_MODE_VEPA:
		return "vepa"
	case netlink.MACVLAN_MODE_BRIDGE:
		return "bridge"
	case netlink.MACVLAN_MODE_PASSTHRU:
		return "passthru"
	case netlink.MACVLAN_MODE_SOURCE:
		return "source"
	}
	return fmt.Sprintf("%d", int(m))
}

func ipvlanMode(m netlink.IPVlanMode) string {
	switch m {
	case netlink.IPVLAN_MODE_L2:
		return "l2"
	case netlink.IPVLAN_MODE_L3:
		return "l3"
	case netlink.IPVLAN_MODE_L3S:
		return "l3s"
	}
	return fmt.Sprintf("%d", int(m))
}

// detach is [Detach] on the namespace of fd.
func detach(fd int, name string) error {
	pod, err := handleIn(fd)
	if errors.Is(err, unix.EBADF) {
		return nil // the namespace was closed: it and its children are gone
	}
	if err != nil {
		return err
	}
	defer pod.Close()
	link, err := pod.LinkByName(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up: %w", err)
	}
	if k := link.Type(); k != Macvlan.String() && k != IPVLAN.String() {
		return fmt.Errorf("%w: %s is a %s, not a macvlan or ipvlan this package made; left alone", ErrMismatch, name, k)
	}
	if err := pod.LinkDel(link); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", link.Type(), err)
	}
	return nil
}

// check is [Check] on the namespace of fd, s normalized.
func check(fd int, s Spec) error {
	l, err := open(fd)
	if err != nil {
		return err
	}
	defer l.close()
	parent, err := l.parent(s.Parent)
	if err != nil {
		return err
	}
	link, err := l.pod.LinkByName(s.Name)
	if isNotFound(err) {
		return fmt.Errorf("%w: no link %s", ErrMismatch, s.Name)
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", s.Name, err)
	}
	o, err := l.observe(link, s)
	if err != nil {
		return err
	}
	if d := checkDiffs(o, s, parent.Attrs().Index); d != nil {
		return fmt.Errorf("%w: %s", ErrMismatch, strings.Join(d, "; "))
	}
	return nil
}

package hsnlink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Errors the functions can return, wrapped with the values concerned.
var (
	// ErrParentNotFound: the hsn netdev named by [Spec.Parent] does not
	// exist in the host's namespace.
	ErrParentNotFound = errors.New("hsn netdev not found")
	// ErrNotSupported: the kernel has no support for the link type (its
	// module is absent), so the mode cannot be used on this node.
	ErrNotSupported = errors.New("link type not supported by the kernel")
	// ErrMismatch: a link of the name exists in the pod's namespace but is
	// not the one asked for (another kind, mode, parent or address), or,
	// from [Check], the link differs from the Spec or is absent.
	ErrMismatch = errors.New("link differs from spec")
	// ErrInvalidSpec: the Spec itself is unusable.
	ErrInvalidSpec = errors.New("invalid hsn link spec")
)

// DefaultName is the interface name in the pod when [Spec.Name] is empty.
const DefaultName = "hsn0"

// Mode is the kind of child link made on the hsn netdev.
type Mode int

const (
	// Macvlan in bridge mode: each pod has its own MAC address, and pods on
	// one node reach each other through the parent without leaving it.
	Macvlan Mode = iota
	// IPVLAN in L2 mode: the pods share the parent's MAC address, for
	// fabrics or switches that limit the MAC addresses per port.
	IPVLAN
)

// String returns the kernel's name of the link type.
func (m Mode) String() string {
	switch m {
	case Macvlan:
		return "macvlan"
	case IPVLAN:
		return "ipvlan"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Spec is the interface to put in a pod.
type Spec struct {
	// Parent is the host's hsn netdev, "hsn0", that the child is made on.
	Parent string
	// Name is the interface's name inside the pod; [DefaultName] if empty.
	Name string
	// Mode is the kind of child: [Macvlan] (the zero value) or [IPVLAN].
	Mode Mode
	// Address is the pod's address with the network's prefix length,
	// 10.150.3.7/16, not masked.
	Address netip.Prefix
	// MTU in bytes; 0 keeps the parent's.
	MTU int
}

// Namespace is an open network namespace descriptor: the agent's held
// handle of the pod's namespace, or an *os.File of one. Fd returns the
// descriptor, or ^uintptr(0) once closed (as *os.File does). The caller
// keeps it open for the duration of the call.
type Namespace interface {
	Fd() uintptr
}

// normalized returns s with its defaults filled in, or an error wrapping
// [ErrInvalidSpec] naming what is wrong.
func (s Spec) normalized() (Spec, error) {
	if s.Name == "" {
		s.Name = DefaultName
	}
	var bad []string
	if err := checkIfName(s.Parent); err != nil {
		bad = append(bad, "parent: "+err.Error())
	}
	if err := checkIfName(s.Name); err != nil {
		bad = append(bad, "name: "+err.Error())
	}
	if s.Mode != Macvlan && s.Mode != IPVLAN {
		bad = append(bad, fmt.Sprintf("unknown mode %d", int(s.Mode)))
	}
	switch a := s.Address.Addr(); {
	case !s.Address.IsValid():
		bad = append(bad, "no address")
	case a.Zone() != "", a.Is4In6(), a.IsUnspecified(), a.IsMulticast(), a.IsLoopback():
		bad = append(bad, fmt.Sprintf("address %s is not a unicast host address", s.Address))
	}
	if s.MTU < 0 {
		bad = append(bad, fmt.Sprintf("negative MTU %d", s.MTU))
	}
	if bad != nil {
		return s, fmt.Errorf("%w: %s", ErrInvalidSpec, strings.Join(bad, "; "))
	}
	return s, nil
}

// checkIfName reports why name cannot be a Linux interface name.
func checkIfName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) >= unix.IFNAMSIZ:
		return fmt.Errorf("%q longer than %d bytes", name, unix.IFNAMSIZ-1)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a name", name)
	case strings.ContainsAny(name, "/: \t\n\r\x00"):
		return fmt.Errorf("%q has a character not allowed in an interface name", name)
	}
	return nil
}

// Attach puts the interface s describes into the pod's namespace: a child
// of s.Parent made inside podNS under a temporary name, renamed to s.Name,
// given s.Address and set up.
//
// It is idempotent: a link named s.Name of the same kind, mode and parent
// that carries s.Address is success (set up if it was down, given the
// address if it has none of that family). One of another kind, mode or
// parent, or with another address, is an error wrapping [ErrMismatch]
// naming both. A missing parent is an error wrapping [ErrParentNotFound],
// a link type the kernel lacks one wrapping [ErrNotSupported]. Whatever
// fails after the child was made, the child is deleted again. It returns
// the interface's hardware address, as the kernel gave it.
func Attach(podNS Namespace, s Spec) (net.HardwareAddr, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", describe(s, -1), err)
	}
	fd := nsFd(podNS)
	defer runtime.KeepAlive(podNS)
	mac, err := attach(fd, s)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", describe(s, fd), err)
	}
	return mac, nil
}

// Detach deletes the interface name ([DefaultName] if empty) from the
// pod's namespace. An absent link, or a namespace already closed or gone,
// is success: the kernel deletes the children in a namespace it destroys.
// A link of the name that is neither a macvlan nor an ipvlan is not this
// package's and is left alone: an error wrapping [ErrMismatch].
func Detach(podNS Namespace, name string) error {
	if name == "" {
		name = DefaultName
	}
	fd := nsFd(podNS)
	defer runtime.KeepAlive(podNS)
	if err := detach(fd, name); err != nil {
		return fmt.Errorf("detach %s in %s: %w", name, nsLabel(fd), err)
	}
	return nil
}

// Check reports whether the interface s describes is in the pod's
// namespace as [Attach] leaves it: present, up, of s.Mode's kind and mode,
// on s.Parent, carrying s.Address, and of s.MTU where that is not 0. Else
// it returns an error wrapping [ErrMismatch] that names every difference,
// or one wrapping [ErrParentNotFound] when the parent is gone.
func Check(podNS Namespace, s Spec) error {
	s, err := s.normalized()
	if err != nil {
		return fmt.Errorf("check %s: %w", describe(s, -1), err)
	}
	fd := nsFd(podNS)
	defer runtime.KeepAlive(podNS)
	if err := check(fd, s); err != nil {
		return fmt.Errorf("check %s: %w", describe(s, fd), err)
	}
	return nil
}

// describe names the link of s in the namespace of fd for an error.
func describe(s Spec, fd int) string {
	ns := "netns unknown"
	if fd >= 0 {
		ns = nsLabel(fd)
	}
	return fmt.Sprintf("%s %s (parent %s, %s, address %s)", s.Mode, s.Name, s.Parent, ns, s.Address)
}

// nsFd returns ns's descriptor as an int, -1 when it is closed.
func nsFd(ns Namespace) int {
	if ns == nil {
		return -1
	}
	fd := ns.Fd()
	if fd > uintptr(1<<31-1) {
		return -1
	}
	return int(fd)
}

// links holds netlink handles on the host's and the pod's namespaces.
type links struct {
	host, pod *netlink.Handle
}

// open opens handles on the calling thread's namespace (the host's) and
// on the namespace of podFd.
func open(podFd int) (*links, error) {
	pod, err := handleIn(podFd)
	if err != nil {
		return nil, err
	}
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		pod.Close()
		return nil, fmt.Errorf("netlink socket in the host's namespace: %w", err)
	}
	return &links{host: host, pod: pod}, nil
}

func (l *links) close() {
	l.host.Close()
	l.pod.Close()
}

// parent returns the host's hsn netdev.
func (l *links) parent(name string) (netlink.Link, error) {
	p, err := l.host.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil, &twoErrors{msg: fmt.Sprintf("hsn netdev %s not found", name), kind: ErrParentNotFound, cause: err}
		}
		return nil, fmt.Errorf("look up hsn netdev %s: %w", name, err)
	}
	return p, nil
}

// twoErrors is an error with its own text that matches both a sentinel of
// this package and the error that caused it.
type twoErrors struct {
	msg         string
	kind, cause error
}

func (e *twoErrors) Error() string   { return e.msg }
func (e *twoErrors) Unwrap() []error { return []error{e.kind, e.cause} }

// isNotFound reports whether err says a link does not exist.
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

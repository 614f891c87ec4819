// Package netreq parses what a pod asks of the high-speed network: the
// pool, the hsn netdev, a subnet or a fixed address (seed 001's pod NIC
// request). It checks only what needs no knowledge of the pools; the
// agent's allocator checks the values against its pools.
package netreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// Annotation is the pod annotation that carries a Request as JSON, for
// the hsn interface the agent adds without Multus. On the CNI path the
// same fields come in the network attachment's `cni-args`.
const Annotation = "slingshot.hpe.com/network"

// ErrInvalid is matched by every error of Parse and Request.Validate.
var ErrInvalid = errors.New("invalid network request")

// MaxLen bounds the annotation's size: it is a few short fields.
const MaxLen = 4096

// Request is what a pod asks for. Every field is optional: the zero value
// asks for any address of the default pool.
type Request struct {
	// Pool names the IP pool, as the controller's --ip-pools name it.
	Pool string `json:"pool,omitempty"`
	// NetDev names the host's hsn netdev the interface sits on ("hsn0").
	NetDev string `json:"netdev,omitempty"`
	// Interface is the interface's name in the pod ("hsn0").
	Interface string `json:"interface,omitempty"`
	// Subnet asks for an address inside this prefix of the pool.
	Subnet netip.Prefix `json:"subnet,omitzero"`
	// IP asks for exactly this address.
	IP netip.Addr `json:"ip,omitzero"`
}

// IsZero reports whether the request asks for nothing in particular.
func (r Request) IsZero() bool { return r == Request{} }

// wire is the JSON form: strings, so that errors can quote what was given.
type wire struct {
	Pool      string `json:"pool"`
	NetDev    string `json:"netdev"`
	Interface string `json:"interface"`
	Subnet    string `json:"subnet"`
	IP        string `json:"ip"`
}

// Parse reads the annotation's value: one JSON object with the fields of
// Request. Unknown fields are refused, so that a typo is not silently
// ignored. Errors wrap ErrInvalid and quote the value at fault.
func Parse(s string) (Request, error) {
	if len(s) > MaxLen {
		return Request{}, fmt.Errorf("%w: annotation %s is %d bytes, more than %d", ErrInvalid, Annotation, len(s), MaxLen)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Request{}, fmt.Errorf("%w: annotation %s: want a JSON object with pool, netdev, interface, subnet, ip: %v", ErrInvalid, Annotation, err)
	}
	if dec.More() {
		return Request{}, fmt.Errorf("%w: annotation %s: trailing data after the JSON object", ErrInvalid, Annotation)
	}
	return FromStrings(w.Pool, w.NetDev, w.Interface, w.Subnet, w.IP)
}

// FromStrings builds a Request from its fields as text, as CNI args carry
// them, and validates it.
func FromStrings(pool, netdev, iface, subnet, ip string) (Request, error) {
	r := Request{Pool: pool, NetDev: netdev, Interface: iface}
	if subnet != "" {
		p, err := netip.ParsePrefix(subnet)
		if err != nil {
			return Request{}, fmt.Errorf("%w: subnet %q is not a CIDR prefix: %v", ErrInvalid, subnet, err)
		}
		r.Subnet = p
	}
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			// Accept an address with its prefix length, as Multus' ips carry it.
			p, perr := netip.ParsePrefix(ip)
			if perr != nil {
				return Request{}, fmt.Errorf("%w: ip %q is not an IP address: %v", ErrInvalid, ip, err)
			}
			a = p.Addr()
		}
		r.IP = a
	}
	return r, r.Validate()
}

// Validate checks the request on its own: names well formed, the subnet
// without host bits, the address inside the subnet. Errors wrap
// ErrInvalid.
func (r Request) Validate() error {
	if r.Pool != "" && !isPoolName(r.Pool) {
		return fmt.Errorf("%w: pool %q is not a DNS label", ErrInvalid, r.Pool)
	}
	if r.NetDev != "" && !isNetdevName(r.NetDev) {
		return fmt.Errorf("%w: netdev %q is not an interface name", ErrInvalid, r.NetDev)
	}
	if r.Interface != "" && !isNetdevName(r.Interface) {
		return fmt.Errorf("%w: interface %q is not an interface name", ErrInvalid, r.Interface)
	}
	if r.Subnet.IsValid() && r.Subnet != r.Subnet.Masked() {
		return fmt.Errorf("%w: subnet %s has host bits set (did you mean %s?)", ErrInvalid, r.Subnet, r.Subnet.Masked())
	}
	if r.IP.IsValid() {
		if r.IP.Zone() != "" {
			return fmt.Errorf("%w: ip %s has a zone", ErrInvalid, r.IP)
		}
		if r.Subnet.IsValid() && !r.Subnet.Contains(r.IP) {
			return fmt.Errorf("%w: ip %s is outside subnet %s", ErrInvalid, r.IP, r.Subnet)
		}
	}
	return nil
}

// isPoolName reports whether s is a DNS label: 1 to 63 of [a-z0-9-], not
// starting or ending with "-". Written out rather than a regexp: this
// package runs in slingshot-ipam, a process per CNI call, whose start
// time compiling patterns would add to every pod's network setup.
func isPoolName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isNetdevName reports whether s is a Linux interface name as requests
// may give it: 1 to 15 of [A-Za-z0-9_.-], starting with a letter or digit.
func isNetdevName(s string) bool {
	if len(s) == 0 || len(s) > 15 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

package ipamplugin

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// source is one place a value of the request came from.
type source struct {
	name, value string
}

// Request builds the pod's request from the configuration, CNI_ARGS and
// CNI_IFNAME. Every source of a value must agree with the others; a
// conflict is a *types.Error with code 100 (ipamwire.CodeInvalidRequest)
// naming both sources and both values, and so is a request netreq
// refuses.
func (c *Config) Request(args Args, ifName string) (netreq.Request, error) {
	a := c.CNIArgs
	pool, err := agree("pool", source{"args.cni.pool", a.Pool}, source{"ipam.pool", c.Pool})
	if err != nil {
		return netreq.Request{}, err
	}
	if a.Pool == "" {
		pool = "" // the network's pool is the default, not the pod's request
	}
	netdev, err := agree("netdev", source{"args.cni.netdev", a.NetDev}, source{"the main plugin's master", c.Master})
	if err != nil {
		return netreq.Request{}, err
	}
	if a.NetDev == "" {
		netdev = ""
	}
	iface, err := agree("interface", source{"args.cni.interface", a.Interface}, source{"CNI_IFNAME", ifName})
	if err != nil {
		return netreq.Request{}, err
	}
	if a.Interface == "" {
		iface = ""
	}
	ip, err := c.ip(args)
	if err != nil {
		return netreq.Request{}, err
	}
	r, err := netreq.FromStrings(pool, netdev, iface, a.Subnet, ip)
	if err != nil {
		return netreq.Request{}, types.NewError(ipamwire.CodeInvalidRequest, err.Error(), "")
	}
	return r, nil
}

// ip returns the one fixed address the sources ask for, or "".
func (c *Config) ip(args Args) (string, error) {
	srcs := []source{
		{"args.cni.ip", c.CNIArgs.IP},
		{"args.cni.ips", strings.Join(c.CNIArgs.IPs, ",")},
		{"runtimeConfig.ips", strings.Join(c.RuntimeIPs, ",")},
		{"CNI_ARGS IP", args.IP},
	}
	var got source
	var addr netip.Addr
	for _, s := range srcs {
		if s.value == "" {
			continue
		}
		if strings.Contains(s.value, ",") {
			return "", types.NewError(ipamwire.CodeInvalidRequest, fmt.Sprintf("%s asks for several addresses (%q): a network of slingshot-ipam gives one", s.name, clip([]byte(s.value))), "")
		}
		a, err := parseAddr(s.value)
		if err != nil {
			return "", types.NewError(ipamwire.CodeInvalidRequest, fmt.Sprintf("%s %q is not an IP address", s.name, clip([]byte(s.value))), "")
		}
		if addr.IsValid() && a != addr {
			return "", conflict("ip", got, s)
		}
		got, addr = s, a
	}
	return got.value, nil
}

// parseAddr reads an address with or without a prefix length; the length
// is the pool's whatever the pod gives.
func parseAddr(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(s)
}

// agree returns the value the sources give, or an error when two give
// different ones.
func agree(what string, srcs ...source) (string, error) {
	var got source
	for _, s := range srcs {
		if s.value == "" {
			continue
		}
		if got.value != "" && s.value != got.value {
			return "", conflict(what, got, s)
		}
		got = s
	}
	return got.value, nil
}

func conflict(what string, a, b source) *types.Error {
	return types.NewError(ipamwire.CodeInvalidRequest,
		fmt.Sprintf("conflicting %s: %s is %q but %s is %q", what, a.name, clip([]byte(a.value)), b.name, clip([]byte(b.value))), "")
}

package ipamplugin

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// About is what the plugin prints when it runs without CNI_COMMAND.
const About = `slingshot-ipam: CNI IPAM plugin for Slingshot HSN addresses from the node's slices, served by slingshot-agent

Configured as the ipam section of a main plugin (macvlan, ipvlan, host-device, SR-IOV):
  "ipam": {"type": "slingshot-ipam", "pool": "hsn0",
           "socket": "` + ipamwire.DefaultSocket + `", "timeout": "30s"}
  pool     the IP pool of the network (required)
  socket   the agent's IPAM socket (default ` + ipamwire.DefaultSocket + `)
  timeout  the bound of each call to the agent (default 30s)
A pod asks for a pool, subnet, ip, netdev or interface in the network's args.cni (Multus cni-args),
for an address in runtimeConfig.ips (the ips capability) or CNI_ARGS IP=; sources must agree.
Other keys of args.cni are refused, but for CNI's own ips and labels.`

// Versions are the CNI spec versions the plugin speaks; GC and STATUS
// exist from 1.1.0 on.
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Funcs returns the plugin's verbs for skel. Every call to the agent ends
// when ctx does; ADD writes its result to stdout.
func Funcs(ctx context.Context, stdout io.Writer) skel.CNIFuncs {
	p := plugin{stdout: stdout}
	return skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return p.add(ctx, a) },
		Del:    func(a *skel.CmdArgs) error { return p.del(ctx, a) },
		Check:  func(a *skel.CmdArgs) error { return p.check(ctx, a) },
		Status: func(a *skel.CmdArgs) error { return p.status(ctx, a) },
		GC:     func(a *skel.CmdArgs) error { return p.gc(ctx, a) },
	}
}

type plugin struct {
	stdout io.Writer
}

func attachment(a *skel.CmdArgs) ipamwire.Attachment {
	return ipamwire.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}
}

func client(c *Config) *ipamwire.Client { return ipamwire.NewClient(c.Socket, c.Timeout) }

func (p plugin) add(ctx context.Context, a *skel.CmdArgs) error {
	c, err := ParseConfig(a.StdinData)
	if err != nil {
		return err
	}
	args, err := ParseArgs(a.Args)
	if err != nil {
		return err
	}
	want, err := c.Request(args, a.IfName)
	if err != nil {
		return err
	}
	resp, err := client(c).Add(ctx, ipamwire.AddRequest{
		Network: c.Network, Attachment: attachment(a), Netns: a.Netns,
		Pod:  ipamwire.Pod{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID},
		Pool: c.Pool, Request: want,
	})
	if err != nil {
		return cniError(err)
	}
	if !resp.Address.IsValid() {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("slingshot agent at %s answered no address", c.Socket), "")
	}
	r, err := (&types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		IPs:        []*types100.IPConfig{{Address: ipNet(resp.Address)}},
	}).GetAsVersion(c.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("result as cniVersion %q", c.CNIVersion), err.Error())
	}
	return r.PrintTo(p.stdout)
}

// ipNet is an address with its network's prefix length, as results carry
// it.
func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// del frees the attachment's address. It reads no CNI_ARGS and asks
// nothing of the pod's request, so that a DEL never fails on what only
// ADD needs; an attachment the agent does not know is not an error.
func (p plugin) del(ctx context.Context, a *skel.CmdArgs) error {
	c, err := ParseConfig(a.StdinData)
	if err != nil {
		return err
	}
	return cniError(client(c).Del(ctx, ipamwire.DelRequest{Network: c.Network, Attachment: attachment(a)}))
}

// check asks the agent whether the attachment still holds the address
// prevResult gives it: one of prevResult's addresses must be the one the
// agent recorded.
func (p plugin) check(ctx context.Context, a *skel.CmdArgs) error {
	c, err := ParseConfig(a.StdinData)
	if err != nil {
		return err
	}
	if c.PrevResult == nil || len(c.PrevResult.IPs) == 0 {
		return invalidConfig("CHECK needs a prevResult with the attachment's address")
	}
	cl := client(c)
	var errs []string
	for _, ip := range c.PrevResult.IPs {
		pfx, ok := prefix(ip.Address)
		if !ok {
			continue
		}
		err := cl.Check(ctx, ipamwire.CheckRequest{Network: c.Network, Attachment: attachment(a), Address: pfx})
		if err == nil {
			return nil
		}
		if e := ipamwire.AsError(err); e.Code != ipamwire.CodeInvalidRequest {
			return cniError(e) // not a mismatch: the agent is down, or has no record
		}
		errs = append(errs, err.Error())
	}
	if len(errs) == 0 {
		return invalidConfig("CHECK: prevResult carries no valid address")
	}
	return types.NewError(ipamwire.CodeInvalidRequest, "CHECK: no address of prevResult is the attachment's", strings.Join(errs, "; "))
}

// prefix reads a result's address; a 128-bit mask of an IPv4 address
// counts the 96 bits of its IPv4-mapped form.
func prefix(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	if bits != a.BitLen() && (bits != 128 || !a.Is4()) {
		return netip.Prefix{}, false
	}
	ones -= bits - a.BitLen()
	if ones < 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// status answers whether the network can take attachments: the agent
// answers and its node's slices of the pool have a free address. Every
// error is code 50 (not available).
func (p plugin) status(ctx context.Context, a *skel.CmdArgs) error {
	c, err := ParseConfig(a.StdinData)
	if err != nil {
		return err
	}
	resp, err := client(c).Status(ctx, ipamwire.StatusRequest{Network: c.Network, Pool: c.Pool})
	if err != nil {
		e := ipamwire.AsError(err)
		return types.NewError(ipamwire.CodeNotAvailable, e.Msg, e.Details)
	}
	if resp.Free <= 0 {
		return types.NewError(ipamwire.CodeNotAvailable, fmt.Sprintf("pool %s has no free address in this node's slices", c.Pool), "")
	}
	return nil
}

// gc frees the network's addresses whose attachment is not valid. A GC
// without cni.dev/valid-attachments is refused: read as an empty list it
// would free every address of the network.
func (p plugin) gc(ctx context.Context, a *skel.CmdArgs) error {
	c, err := ParseConfig(a.StdinData)
	if err != nil {
		return err
	}
	if c.ValidAttachments == nil {
		return invalidConfig("GC without cni.dev/valid-attachments: refusing to free every address of network " + c.Network)
	}
	_, err = client(c).GC(ctx, ipamwire.GCRequest{Network: c.Network, Valid: c.ValidAttachments})
	return cniError(err)
}

// cniError turns the client's error into the CNI error skel prints; nil
// stays nil.
func cniError(err error) error {
	if err == nil {
		return nil
	}
	e := ipamwire.AsError(err)
	return types.NewError(e.Code, e.Msg, e.Details)
}

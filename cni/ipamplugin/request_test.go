package ipamplugin

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Args
		msg  string // a part of the error's message; "" for no error
	}{
		{name: "empty"},
		{name: "kubelet's", in: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
			want: Args{PodNamespace: "ns", PodName: "p-0", PodUID: "u-1"}},
		{name: "IP as static takes it", in: "IP=10.150.0.9/16;K8S_POD_NAME=p", want: Args{PodName: "p", IP: "10.150.0.9/16"}},
		{name: "unknown keys ignored without IgnoreUnknown", in: "FOO=bar;MAC=aa:bb", want: Args{}},
		{name: "empty pairs skipped", in: ";K8S_POD_NAME=p;;", want: Args{PodName: "p"}},
		{name: "value with =", in: "K8S_POD_NAME=a=b", want: Args{PodName: "a=b"}},
		{name: "same key same value", in: "IP=10.0.0.1;IP=10.0.0.1", want: Args{IP: "10.0.0.1"}},
		{name: "same key two values", in: "IP=10.0.0.1;IP=10.0.0.2", msg: `IP is given twice, "10.0.0.1" and "10.0.0.2"`},
		{name: "no =", in: "K8S_POD_NAME", msg: `"K8S_POD_NAME" is not KEY=VALUE`},
		{name: "no key", in: "=x", msg: `"=x" is not KEY=VALUE`},
		{name: "too long", in: strings.Repeat("A=b;", 20000), msg: "more than 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.in)
			if tt.msg != "" {
				checkCNIError(t, err, types.ErrInvalidEnvironmentVariables, tt.msg)
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParseArgs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	base := Config{Network: "hsn", Pool: "hsn0", Master: "hsn0"}
	tests := []struct {
		name   string
		edit   func(*Config)
		args   Args
		ifName string
		want   netreq.Request
		msg    string // a part of the error's message; "" for no error
	}{
		{name: "nothing asked", ifName: "net1"},
		{name: "the network's own values are no request", edit: func(c *Config) {
			c.CNIArgs = CNIArgs{Pool: "hsn0", NetDev: "hsn0", Interface: "net1"}
		}, ifName: "net1", want: netreq.Request{Pool: "hsn0", NetDev: "hsn0", Interface: "net1"}},
		{name: "subnet", edit: func(c *Config) { c.CNIArgs.Subnet = "10.150.4.0/24" },
			want: netreq.Request{Subnet: netip.MustParsePrefix("10.150.4.0/24")}},
		{name: "ip from every source, lengths ignored", edit: func(c *Config) {
			c.CNIArgs.IP, c.CNIArgs.IPs, c.RuntimeIPs = "10.150.4.9", []string{"10.150.4.9/24"}, []string{"10.150.4.9/16"}
		}, args: Args{IP: "10.150.4.9/16"}, want: netreq.Request{IP: netip.MustParseAddr("10.150.4.9")}},
		{name: "ip from runtimeConfig", edit: func(c *Config) { c.RuntimeIPs = []string{"10.150.4.9/16"} },
			want: netreq.Request{IP: netip.MustParseAddr("10.150.4.9")}},
		{name: "ip from CNI_ARGS", args: Args{IP: "10.150.4.9"}, want: netreq.Request{IP: netip.MustParseAddr("10.150.4.9")}},
		{name: "netdev with no master to check", edit: func(c *Config) { c.Master, c.CNIArgs.NetDev = "", "hsn1" },
			want: netreq.Request{NetDev: "hsn1"}},
		{name: "pool conflict", edit: func(c *Config) { c.CNIArgs.Pool = "hsn1" },
			msg: `conflicting pool: args.cni.pool is "hsn1" but ipam.pool is "hsn0"`},
		{name: "netdev conflict", edit: func(c *Config) { c.CNIArgs.NetDev = "hsn1" },
			msg: `conflicting netdev: args.cni.netdev is "hsn1" but the main plugin's master is "hsn0"`},
		{name: "interface conflict", edit: func(c *Config) { c.CNIArgs.Interface = "hsn0" }, ifName: "net1",
			msg: `conflicting interface: args.cni.interface is "hsn0" but CNI_IFNAME is "net1"`},
		{name: "ip conflict args.cni and runtimeConfig", edit: func(c *Config) {
			c.CNIArgs.IP, c.RuntimeIPs = "10.150.4.9", []string{"10.150.4.10/16"}
		}, msg: `conflicting ip: args.cni.ip is "10.150.4.9" but runtimeConfig.ips is "10.150.4.10/16"`},
		{name: "ip conflict runtimeConfig and CNI_ARGS", edit: func(c *Config) { c.RuntimeIPs = []string{"10.150.4.9/16"} },
			args: Args{IP: "10.150.4.7"}, msg: `conflicting ip: runtimeConfig.ips is "10.150.4.9/16" but CNI_ARGS IP is "10.150.4.7"`},
		{name: "several ips", edit: func(c *Config) { c.RuntimeIPs = []string{"10.150.4.9/16", "fd00::9/64"} },
			msg: `runtimeConfig.ips asks for several addresses ("10.150.4.9/16,fd00::9/64")`},
		{name: "CNI_ARGS ip list", args: Args{IP: "10.150.4.9/16,10.150.4.10/16"}, msg: "CNI_ARGS IP asks for several addresses"},
		{name: "ip not an address", args: Args{IP: "ten"}, msg: `CNI_ARGS IP "ten" is not an IP address`},
		{name: "netreq refuses", edit: func(c *Config) { c.CNIArgs.Subnet = "10.150.4.1/24" }, msg: "subnet 10.150.4.1/24 has host bits set"},
		{name: "ip outside subnet", edit: func(c *Config) { c.CNIArgs.Subnet, c.CNIArgs.IP = "10.150.4.0/24", "10.150.5.1" },
			msg: "ip 10.150.5.1 is outside subnet 10.150.4.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			if tt.edit != nil {
				tt.edit(&c)
			}
			got, err := c.Request(tt.args, tt.ifName)
			if tt.msg != "" {
				checkCNIError(t, err, ipamwire.CodeInvalidRequest, tt.msg)
				return
			}
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if d := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})); d != "" {
				t.Errorf("Request (-want +got):\n%s", d)
			}
		})
	}
}

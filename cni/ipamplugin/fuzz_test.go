package ipamplugin

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// mustBeCNIError fails unless err is nil or a *types.Error: skel prints any
// other error as an internal one, losing its code.
func mustBeCNIError(t *testing.T, what string, err error) {
	t.Helper()
	var e *types.Error
	if err != nil && !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T) is not a *types.Error", what, err, err)
	}
}

var configSeeds = []string{
	conf(ipamHSN0),
	conf(`{"type":"slingshot-ipam","pool":"hsn0","socket":"/run/x.sock","timeout":"2s"}`),
	conf(ipamHSN0, `"args":{"cni":{"pool":"hsn0","subnet":"10.150.4.0/24","ip":"10.150.4.9","netdev":"hsn0","interface":"net1","ips":["10.150.4.9/16"]}}`),
	conf(ipamHSN0, `"runtimeConfig":{"ips":["10.150.4.9/16"]}`, `"cni.dev/valid-attachments":[{"containerID":"c","ifname":"i"}]`),
	conf(ipamHSN0, `"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.150.0.5/16"}]}`),
	`{"cniVersion":"0.3.1","name":"n","ipam":{"pool":"p"},"prevResult":{"ips":[{"version":"4","address":"10.0.0.1/8"}]}}`,
	`{"cniVersion":"0.4.0","name":"n","ipam":{"pool":"p"},"prevResult":{"ips":[{"version":"6","address":"::1/8"}]}}`,
	`{"name":"n","ipam":{"pool":"p"},"prevResult":{"cniVersion":"9.9.9"}}`,
	`{"name":"n","ipam":{}}`, `null`, `[]`, `{"name":1}`,
}

// FuzzParseConfig: any network configuration is parsed or refused with a
// CNI error, never a panic; a parsed one has what every verb relies on.
func FuzzParseConfig(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		mustBeCNIError(t, "ParseConfig", err)
		if err != nil {
			return
		}
		if c.Network == "" || c.Pool == "" || c.Socket == "" || c.Timeout <= 0 || c.Timeout > MaxTimeout {
			t.Fatalf("ParseConfig(%q) = %+v: a value every verb needs is missing", data, c)
		}
		if c.PrevResult != nil {
			for _, ip := range c.PrevResult.IPs {
				prefix(ip.Address)
			}
		}
	})
}

// FuzzParseArgs: any CNI_ARGS is parsed or refused with a CNI error.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", "IP=10.0.0.1/8", "IP=1;IP=2", "=", ";;", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParseArgs(s)
		mustBeCNIError(t, "ParseArgs", err)
	})
}

// FuzzRequest: configuration, CNI_ARGS and CNI_IFNAME together give a
// valid request or a CNI error.
func FuzzRequest(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s), "IP=10.150.4.9", "net1")
	}
	f.Fuzz(func(t *testing.T, data []byte, cniArgs, ifName string) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		args, err := ParseArgs(cniArgs)
		if err != nil {
			return
		}
		r, err := c.Request(args, ifName)
		mustBeCNIError(t, "Request", err)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Request gave %+v, which does not validate: %v", r, err)
		}
		if r.Pool != "" && r.Pool != c.Pool {
			t.Fatalf("Request gave pool %q on a network of pool %q", r.Pool, c.Pool)
		}
	})
}

package ipamplugin

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// conf is a macvlan network with our ipam section and extra top-level
// keys spliced in.
func conf(ipam string, extra ...string) string {
	s := `{"cniVersion":"1.0.0","name":"hsn","type":"macvlan","master":"hsn0","ipam":` + ipam
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

const ipamHSN0 = `{"type":"slingshot-ipam","pool":"hsn0"}`

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Config
		code uint
		msg  string // a part of the error's message
	}{
		{name: "defaults", in: conf(ipamHSN0),
			want: &Config{Network: "hsn", CNIVersion: "1.0.0", Pool: "hsn0", Socket: ipamwire.DefaultSocket, Timeout: ipamwire.DefaultCallTimeout, Master: "hsn0"}},
		{name: "all ipam keys", in: conf(`{"type":"slingshot-ipam","pool":"hsn1","socket":"/tmp/x.sock","timeout":"1500ms"}`),
			want: &Config{Network: "hsn", CNIVersion: "1.0.0", Pool: "hsn1", Socket: "/tmp/x.sock", Timeout: 1500 * time.Millisecond, Master: "hsn0"}},
		{name: "args.cni, ips and valid attachments", in: conf(ipamHSN0,
			`"args":{"cni":{"pool":"hsn0","subnet":"10.150.4.0/24","ip":"10.150.4.9","netdev":"hsn0","interface":"net1","ips":["10.150.4.9/16"],"labels":[{"key":"k","value":"v"}]}}`,
			`"runtimeConfig":{"ips":["10.150.4.9/16"],"mac":"x"}`,
			`"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"net1"}]`),
			want: &Config{Network: "hsn", CNIVersion: "1.0.0", Pool: "hsn0", Socket: ipamwire.DefaultSocket, Timeout: ipamwire.DefaultCallTimeout, Master: "hsn0",
				CNIArgs:          CNIArgs{Pool: "hsn0", Subnet: "10.150.4.0/24", IP: "10.150.4.9", NetDev: "hsn0", Interface: "net1", IPs: []string{"10.150.4.9/16"}},
				RuntimeIPs:       []string{"10.150.4.9/16"},
				ValidAttachments: []ipamwire.Attachment{{ContainerID: "c1", IfName: "net1"}}}},
		{name: "empty valid attachments are kept apart from none", in: conf(ipamHSN0, `"cni.dev/valid-attachments":[]`),
			want: &Config{Network: "hsn", CNIVersion: "1.0.0", Pool: "hsn0", Socket: ipamwire.DefaultSocket, Timeout: ipamwire.DefaultCallTimeout, Master: "hsn0",
				ValidAttachments: []ipamwire.Attachment{}}},
		{name: "not JSON", in: `{"name":`, code: types.ErrDecodingFailure, msg: "decode network configuration"},
		{name: "no name", in: `{"cniVersion":"1.0.0","ipam":` + ipamHSN0 + `}`, code: types.ErrInvalidNetworkConfig, msg: "no name"},
		{name: "no ipam", in: `{"cniVersion":"1.0.0","name":"hsn"}`, code: types.ErrInvalidNetworkConfig, msg: "no ipam section"},
		{name: "ipam null", in: conf(`null`), code: types.ErrInvalidNetworkConfig, msg: "no ipam section"},
		{name: "ipam not an object", in: conf(`"hsn0"`), code: types.ErrInvalidNetworkConfig, msg: "ipam section"},
		{name: "no pool", in: conf(`{"type":"slingshot-ipam"}`), code: types.ErrInvalidNetworkConfig, msg: "ipam.pool is required"},
		{name: "unknown ipam key", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","pol":"x"}`), code: types.ErrInvalidNetworkConfig, msg: `unknown field "pol"`},
		{name: "relative socket", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","socket":"ipam.sock"}`), code: types.ErrInvalidNetworkConfig, msg: `ipam.socket "ipam.sock"`},
		{name: "socket too long", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","socket":"/` + strings.Repeat("s", 120) + `"}`), code: types.ErrInvalidNetworkConfig, msg: "at most 107 bytes"},
		{name: "timeout not a duration", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","timeout":"30"}`), code: types.ErrInvalidNetworkConfig, msg: `ipam.timeout "30"`},
		{name: "timeout zero", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","timeout":"0s"}`), code: types.ErrInvalidNetworkConfig, msg: `ipam.timeout "0s"`},
		{name: "timeout too long", in: conf(`{"type":"slingshot-ipam","pool":"hsn0","timeout":"1h"}`), code: types.ErrInvalidNetworkConfig, msg: "at most 5m0s"},
		{name: "args.cni value not a string", in: conf(ipamHSN0, `"args":{"cni":{"ip":["10.0.0.1"]}}`), code: types.ErrInvalidNetworkConfig, msg: `args.cni.ip is ["10.0.0.1"], not a string`},
		// A typo of a known key handed out an address anywhere in the pool.
		{name: "args.cni unknown field subnett refused", in: conf(ipamHSN0, `"args":{"cni":{"subnett":"10.150.4.0/24"}}`), code: types.ErrInvalidNetworkConfig, msg: `args.cni: unknown field "subnett"`},
		{name: "args.cni unknown fields all named, sorted", in: conf(ipamHSN0, `"args":{"cni":{"zz":1,"pool":"hsn0","aa":{}}}`), code: types.ErrInvalidNetworkConfig, msg: `unknown field "aa", "zz"`},
		{name: "args.cni.ips not a list", in: conf(ipamHSN0, `"args":{"cni":{"ips":"10.0.0.1"}}`), code: types.ErrInvalidNetworkConfig, msg: "args.cni.ips is \"10.0.0.1\", not a list"},
		{name: "runtimeConfig.ips not a list", in: conf(ipamHSN0, `"runtimeConfig":{"ips":"10.0.0.1"}`), code: types.ErrDecodingFailure},
		{name: "prevResult not a result", in: conf(ipamHSN0, `"prevResult":{"ips":[{"address":"nonsense"}]}`), code: types.ErrDecodingFailure, msg: "prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tt.in))
			if tt.want != nil {
				if err != nil {
					t.Fatalf("ParseConfig: %v", err)
				}
				if d := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Prefix{})); d != "" {
					t.Errorf("ParseConfig (-want +got):\n%s", d)
				}
				return
			}
			checkCNIError(t, err, tt.code, tt.msg)
		})
	}
}

// TestParseConfigPrevResult reads prevResults of the versions a runtime
// may pass as current results.
func TestParseConfigPrevResult(t *testing.T) {
	for _, tc := range []struct{ version, prev string }{
		{"1.0.0", `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.150.0.5/16"}]}`},
		{"0.4.0", `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.150.0.5/16"}]}`},
		{"0.3.1", `{"ips":[{"version":"4","address":"10.150.0.5/16"}]}`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			in := `{"cniVersion":"` + tc.version + `","name":"hsn","ipam":` + ipamHSN0 + `,"prevResult":` + tc.prev + `}`
			c, err := ParseConfig([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if c.PrevResult == nil || len(c.PrevResult.IPs) != 1 {
				t.Fatalf("prevResult = %+v, want one address", c.PrevResult)
			}
			if got, ok := prefix(c.PrevResult.IPs[0].Address); !ok || got != netip.MustParsePrefix("10.150.0.5/16") {
				t.Errorf("prevResult address = %v (%v), want 10.150.0.5/16", got, ok)
			}
		})
	}
}

// checkCNIError fails unless err is a *types.Error with code and a
// message that contains msg.
func checkCNIError(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *types.Error", err, err)
	}
	if e.Code != code {
		t.Errorf("code %d, want %d (%v)", e.Code, code, e)
	}
	if !strings.Contains(e.Error(), msg) {
		t.Errorf("error %q does not say %q", e.Error(), msg)
	}
}

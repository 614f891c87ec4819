package ipamplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// netConfig is a macvlan network on hsn0 whose ipam asks socket, in
// cniVersion v, with extra top-level keys.
func netConfig(v, socket string, extra ...string) []byte {
	s := `{"cniVersion":"` + v + `","name":"hsn","type":"macvlan","master":"hsn0",` +
		`"ipam":{"type":"slingshot-ipam","pool":"hsn0","socket":"` + socket + `","timeout":"5s"}`
	for _, e := range extra {
		s += "," + e
	}
	return []byte(s + "}")
}

// call runs one verb of the plugin as skel would and returns what it
// wrote to stdout.
func call(t *testing.T, verb string, conf []byte, containerID, ifName, cniArgs string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	funcs := Funcs(context.Background(), &out)
	f := map[string]func(*skel.CmdArgs) error{"ADD": funcs.Add, "DEL": funcs.Del, "CHECK": funcs.Check, "STATUS": funcs.Status, "GC": funcs.GC}[verb]
	err := f(&skel.CmdArgs{ContainerID: containerID, Netns: "/var/run/netns/pod", IfName: ifName, Args: cniArgs, StdinData: conf})
	return out.String(), err
}

func addResult(t *testing.T, v string, out string) *types100.Result {
	t.Helper()
	r, err := version.NewResult(v, []byte(out))
	if err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	if r.Version() != v {
		t.Errorf("result version %s, want %s", r.Version(), v)
	}
	cur, err := types100.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

func TestAddCheckDel(t *testing.T) {
	a := newFakeAgent(t)
	conf := netConfig("1.0.0", a.socket, `"args":{"cni":{"subnet":"10.150.0.0/24"}}`)
	att := ipamwire.Attachment{ContainerID: "c1", IfName: "net1"}
	out, err := call(t, "ADD", conf, "c1", "net1", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p-0;K8S_POD_UID=u1")
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	r := addResult(t, "1.0.0", out)
	if len(r.IPs) != 1 || len(r.Interfaces) != 0 || r.IPs[0].Interface != nil || len(r.Routes) != 0 {
		t.Fatalf("ADD result %s: want one address and no interface, as host-local's", out)
	}
	got, _ := prefix(r.IPs[0].Address)
	if held, _ := a.held(att); got != held || got != netip.MustParsePrefix("10.150.0.1/16") {
		t.Errorf("ADD gave %v, the agent holds %v for it, want 10.150.0.1/16 in both", got, held)
	}
	wantReq := ipamwire.AddRequest{Network: "hsn", Attachment: att, Netns: "/var/run/netns/pod",
		Pod: ipamwire.Pod{Namespace: "ns", Name: "p-0", UID: "u1"}, Pool: "hsn0",
		Request: netreq.Request{Subnet: netip.MustParsePrefix("10.150.0.0/24")}}
	if d := cmp.Diff([]ipamwire.AddRequest{wantReq}, a.adds, cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})); d != "" {
		t.Errorf("the agent was asked (-want +got):\n%s", d)
	}

	if out2, err := call(t, "ADD", conf, "c1", "net1", ""); err != nil || addResult(t, "1.0.0", out2).IPs[0].Address.String() != "10.150.0.1/16" {
		t.Errorf("second ADD of c1/net1 = %s, %v; want 10.150.0.1/16 again", out2, err)
	}

	prev := `"prevResult":` + out
	if _, err := call(t, "CHECK", netConfig("1.0.0", a.socket, prev), "c1", "net1", ""); err != nil {
		t.Errorf("CHECK with ADD's result: %v", err)
	}
	wrong := `"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.150.0.9/16"}]}`
	_, err = call(t, "CHECK", netConfig("1.0.0", a.socket, wrong), "c1", "net1", "")
	checkCNIError(t, err, ipamwire.CodeInvalidRequest, "10.150.0.1/16 recorded, not 10.150.0.9/16")
	_, err = call(t, "CHECK", conf, "c1", "net1", "")
	checkCNIError(t, err, types.ErrInvalidNetworkConfig, "CHECK needs a prevResult")

	if _, err := call(t, "DEL", conf, "c1", "net1", ""); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if p, ok := a.held(att); ok {
		t.Errorf("after DEL the agent still holds %v", p)
	}
	if _, err := call(t, "DEL", conf, "c1", "net1", ""); err != nil {
		t.Errorf("DEL of an unknown attachment: %v", err)
	}
	_, err = call(t, "CHECK", netConfig("1.0.0", a.socket, prev), "c1", "net1", "")
	checkCNIError(t, err, 3, "no address recorded for container c1 interface net1")
}

// ADD answers in the configuration's version, every version the plugin
// claims.
func TestAddResultVersions(t *testing.T) {
	a := newFakeAgent(t)
	for i, v := range Versions.SupportedVersions() {
		out, err := call(t, "ADD", netConfig(v, a.socket), "c"+v, "net1", "")
		if err != nil {
			t.Fatalf("ADD %s: %v", v, err)
		}
		r := addResult(t, v, out)
		want := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 150, 0, byte(i + 1)}), 16)
		if got, _ := prefix(r.IPs[0].Address); got != want {
			t.Errorf("ADD %s gave %v, want %v", v, got, want)
		}
	}
}

// The pod's request reaches the agent from each source, and a conflict
// never reaches it.
func TestAddRequestSources(t *testing.T) {
	a := newFakeAgent(t)
	ip := `"runtimeConfig":{"ips":["10.150.7.7/16"]}`
	out, err := call(t, "ADD", netConfig("1.0.0", a.socket, ip), "c1", "net1", "IP=10.150.7.7")
	if err != nil || addResult(t, "1.0.0", out).IPs[0].Address.String() != "10.150.7.7/16" {
		t.Fatalf("ADD with ips and IP= agreeing = %s, %v; want 10.150.7.7/16", out, err)
	}
	_, err = call(t, "ADD", netConfig("1.0.0", a.socket, ip), "c2", "net1", "IP=10.150.7.8")
	checkCNIError(t, err, ipamwire.CodeInvalidRequest, `runtimeConfig.ips is "10.150.7.7/16" but CNI_ARGS IP is "10.150.7.8"`)
	_, err = call(t, "ADD", netConfig("1.0.0", a.socket), "c3", "net1", "IP")
	checkCNIError(t, err, types.ErrInvalidEnvironmentVariables, `"IP" is not KEY=VALUE`)
	if len(a.adds) != 1 {
		t.Errorf("the agent was asked %d times, want once: refused requests never reach it", len(a.adds))
	}
}

// The agent's errors come through with their codes.
func TestAgentErrorsPassThrough(t *testing.T) {
	a := newFakeAgent(t)
	a.set(func(a *fakeAgent) {
		a.fail = &ipamwire.Error{Code: ipamwire.CodePoolFull, Msg: "ip pool full: pool hsn0 has no free slice", Details: "node n1"}
	})
	_, err := call(t, "ADD", netConfig("1.0.0", a.socket), "c1", "net1", "")
	checkCNIError(t, err, ipamwire.CodePoolFull, "pool hsn0 has no free slice; node n1")
	_, err = call(t, "DEL", netConfig("1.0.0", a.socket), "c1", "net1", "")
	checkCNIError(t, err, ipamwire.CodePoolFull, "pool hsn0")
}

func TestStatus(t *testing.T) {
	a := newFakeAgent(t)
	if _, err := call(t, "STATUS", netConfig("1.1.0", a.socket), "", "", ""); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	if want := (ipamwire.StatusRequest{Network: "hsn", Pool: "hsn0"}); len(a.status) != 1 || a.status[0] != want {
		t.Errorf("the agent was asked %+v, want %+v", a.status, want)
	}
	a.set(func(a *fakeAgent) { a.free = 0 })
	_, err := call(t, "STATUS", netConfig("1.1.0", a.socket), "", "", "")
	checkCNIError(t, err, ipamwire.CodeNotAvailable, "pool hsn0 has no free address")
	other := []byte(strings.Replace(string(netConfig("1.1.0", a.socket)), `"pool":"hsn0"`, `"pool":"hsn9"`, 1))
	_, err = call(t, "STATUS", other, "", "", "")
	checkCNIError(t, err, ipamwire.CodeNotAvailable, `no ip pool named "hsn9"`)
	down := filepath.Join(t.TempDir(), "none.sock")
	_, err = call(t, "STATUS", netConfig("1.1.0", down), "", "", "")
	checkCNIError(t, err, ipamwire.CodeNotAvailable, "slingshot agent not reachable at "+down)
}

func TestGC(t *testing.T) {
	a := newFakeAgent(t)
	for _, c := range []string{"c1", "c2", "c3"} {
		if _, err := call(t, "ADD", netConfig("1.1.0", a.socket), c, "net1", ""); err != nil {
			t.Fatal(err)
		}
	}
	valid := `"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"net1"}]`
	if _, err := call(t, "GC", netConfig("1.1.0", a.socket, valid), "", "", ""); err != nil {
		t.Fatalf("GC: %v", err)
	}
	want := []ipamwire.GCRequest{{Network: "hsn", Valid: []ipamwire.Attachment{{ContainerID: "c2", IfName: "net1"}}}}
	if d := cmp.Diff(want, a.gcs); d != "" {
		t.Errorf("the agent was asked (-want +got):\n%s", d)
	}
	for c, want := range map[string]bool{"c1": false, "c2": true, "c3": false} {
		if _, ok := a.held(ipamwire.Attachment{ContainerID: c, IfName: "net1"}); ok != want {
			t.Errorf("after GC %s holds an address: %v, want %v", c, ok, want)
		}
	}
	_, err := call(t, "GC", netConfig("1.1.0", a.socket), "", "", "")
	checkCNIError(t, err, types.ErrInvalidNetworkConfig, "GC without cni.dev/valid-attachments")
	if len(a.gcs) != 1 {
		t.Errorf("a GC without valid attachments reached the agent")
	}
}

// An agent that is down fails every verb with code 11 and the socket's
// path, at once; one that never answers fails within the configured
// timeout.
func TestAgentDown(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the socket file stays, nobody listens: ECONNREFUSED

	for name, socket := range map[string]string{"no socket": filepath.Join(dir, "none.sock"), "stale socket": stale} {
		for _, verb := range []string{"ADD", "DEL"} {
			start := time.Now()
			_, err := call(t, verb, netConfig("1.0.0", socket), "c1", "net1", "")
			took := time.Since(start)
			checkCNIError(t, err, ipamwire.CodeTryAgainLater, "slingshot agent not reachable at "+socket)
			if took >= ipamwire.DefaultDialTimeout {
				t.Errorf("%s %s took %v, the dial timeout is %v", name, verb, took, ipamwire.DefaultDialTimeout)
			}
		}
	}

	hung := filepath.Join(dir, "hung.sock")
	hl, err := net.Listen("unix", hung) // accepts into its backlog, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	conf := bytes.Replace(netConfig("1.0.0", hung), []byte(`"timeout":"5s"`), []byte(`"timeout":"300ms"`), 1)
	start := time.Now()
	_, err = call(t, "ADD", conf, "c1", "net1", "")
	took := time.Since(start)
	checkCNIError(t, err, ipamwire.CodeTryAgainLater, "slingshot agent not reachable at "+hung)
	if took < 300*time.Millisecond || took > 300*time.Millisecond+ipamwire.DefaultDialTimeout {
		t.Errorf("ADD to an agent that never answers took %v, want the 300ms timeout", took)
	}
}

// The result's JSON is what a runtime reads: no interface index, the
// pool's prefix length.
func TestAddResultJSON(t *testing.T) {
	a := newFakeAgent(t)
	out, err := call(t, "ADD", netConfig("1.0.0", a.socket), "c1", "net1", "")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"cniVersion": "1.0.0", "ips": []any{map[string]any{"address": "10.150.0.1/16"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ADD printed (-want +got):\n%s", d)
	}
}

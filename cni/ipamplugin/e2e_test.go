package ipamplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// debianCNI is where Debian's containernetworking-plugins (v1.1.1, CNI
// spec up to 1.0.0) install the main plugins.
const debianCNI = "/usr/lib/cni"

const podIf = "net1"

// e2e is the real parts together: the slingshot-ipam binary, the agent's
// allocator behind its socket, Debian's main plugins driven by libcni, a
// stand-in host namespace with hsn0, and a pod namespace.
type e2e struct {
	t         testing.TB
	agent     *realAgent
	host, pod *os.File
	hostNL    *netlink.Handle
	podNL     *netlink.Handle
	pluginDir string
	cni       *libcni.CNIConfig
}

func newE2E(t testing.TB) *e2e {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "needs root: network namespaces and links")
	}
	if _, err := os.Stat(filepath.Join(debianCNI, "macvlan")); err != nil {
		testenv.RequirePrivileged(t, fmt.Sprintf("no Debian CNI plugins: %v (apt-get install containernetworking-plugins)", err))
	}
	e := &e2e{t: t, agent: startAgent(t), host: testenv.NewNetNS(t), pod: testenv.NewNetNS(t), pluginDir: buildPlugin(t)}
	e.hostNL, e.podNL = nlIn(t, e.host), nlIn(t, e.pod)
	addVeth(t, e.hostNL, "hsn0", "hsnpeer")
	// libcni's cache of results, under the test's directory, not /var/lib/cni.
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{e.pluginDir, debianCNI}, t.TempDir(), nil)
	return e
}

// network is a conflist of one main plugin (macvlan, ipvlan) on hsn0 with
// slingshot-ipam, in cniVersion 1.0.0 (Debian's plugins speak no later).
func (e *e2e) network(main string) *libcni.NetworkConfigList {
	e.t.Helper()
	mode := map[string]string{"macvlan": "bridge", "ipvlan": "l2"}[main]
	list, err := libcni.ConfListFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"hsn","plugins":[
		{"type":%q,"master":"hsn0","mode":%q,"ipam":{"type":"slingshot-ipam","pool":"hsn0","socket":%q,"timeout":"10s"}}]}`,
		main, mode, e.agent.socket))
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

func (e *e2e) rt(containerID string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: containerID, NetNS: nsPath(e.pod), IfName: podIf,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "mpi-" + containerID}}}
}

// add, check, del run libcni from a thread in the stand-in host, so that
// the plugins it starts find hsn0 there.
func (e *e2e) add(list *libcni.NetworkConfigList, containerID string) (*types100.Result, error) {
	var res *types100.Result
	err := testenv.InNetNS(e.host, func() error {
		r, err := e.cni.AddNetworkList(context.Background(), list, e.rt(containerID))
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	return res, err
}

func (e *e2e) check(list *libcni.NetworkConfigList, containerID string) error {
	return testenv.InNetNS(e.host, func() error { return e.cni.CheckNetworkList(context.Background(), list, e.rt(containerID)) })
}

func (e *e2e) del(list *libcni.NetworkConfigList, containerID string) error {
	return testenv.InNetNS(e.host, func() error { return e.cni.DelNetworkList(context.Background(), list, e.rt(containerID)) })
}

// podAddress returns the one IPv4 address of the pod's interface.
func (e *e2e) podAddress() ([]string, bool) {
	as, ok := addrsOf(e.t, e.podNL, podIf)
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out, ok
}

// ipamADD runs slingshot-ipam's ADD alone, as a main plugin does.
func (e *e2e) ipamADD(list *libcni.NetworkConfigList, containerID string) (*types100.Result, error) {
	conf, err := libcni.InjectConf(&libcni.PluginConfig{Bytes: list.Plugins[0].Bytes}, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		return nil, err
	}
	args := &invoke.Args{Command: "ADD", ContainerID: containerID, NetNS: nsPath(e.pod), IfName: podIf, Path: e.pluginDir}
	r, err := invoke.ExecPluginWithResult(context.Background(), filepath.Join(e.pluginDir, "slingshot-ipam"), conf.Bytes, args, nil)
	if err != nil {
		return nil, err
	}
	return types100.NewResultFromResult(r)
}

// TestE2EMacvlan: macvlan with slingshot-ipam on the stand-in hsn0, from
// ADD to DEL, on real namespaces.
func TestE2EMacvlan(t *testing.T) {
	e := newE2E(t)
	net := e.network("macvlan")
	res, err := e.add(net, "c1")
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if len(res.IPs) != 1 {
		t.Fatalf("ADD result has %d addresses, want 1: %v", len(res.IPs), res)
	}
	got, _ := prefix(res.IPs[0].Address)
	if !e.agent.inNodeSlice(got) {
		t.Errorf("ADD gave %v, not an address of the node's slices %v", got, e.agent.ctl.Held(hsn0.Name, testNode))
	}
	if addrs, ok := e.podAddress(); !ok || !slices.Equal(addrs, []string{got.String()}) {
		t.Errorf("the pod's %s carries %v (exists: %v), want [%v]", podIf, addrs, ok, got)
	}
	if err := e.check(net, "c1"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	again, err := e.ipamADD(net, "c1")
	if err != nil {
		t.Fatalf("second ADD of c1/%s: %v", podIf, err)
	}
	if p, _ := prefix(again.IPs[0].Address); p != got {
		t.Errorf("second ADD of c1/%s gave %v, want %v again", podIf, p, got)
	}
	if err := e.del(net, "c1"); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if o := e.agent.owners(); len(o) != 0 {
		t.Errorf("after DEL the allocator still holds %v", o)
	}
	if addrs, ok := e.podAddress(); ok {
		t.Errorf("after DEL the pod still has %s with %v", podIf, addrs)
	}
	if err := e.del(net, "never-added"); err != nil {
		t.Errorf("DEL of an unknown container: %v", err)
	}
}

// TestE2ECycles: ADD/DEL cycles through macvlan leave nothing allocated
// and no link behind.
func TestE2ECycles(t *testing.T) {
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	e := newE2E(t)
	net := e.network("macvlan")
	seen := map[string]bool{}
	for i := range cycles {
		id := fmt.Sprintf("cycle-%d", i)
		res, err := e.add(net, id)
		if err != nil {
			t.Fatalf("cycle %d: ADD: %v", i, err)
		}
		p, _ := prefix(res.IPs[0].Address)
		if !e.agent.inNodeSlice(p) {
			t.Fatalf("cycle %d: ADD gave %v outside the node's slices", i, p)
		}
		seen[p.String()] = true
		if err := e.del(net, id); err != nil {
			t.Fatalf("cycle %d: DEL: %v", i, err)
		}
	}
	if o := e.agent.owners(); len(o) != 0 {
		t.Errorf("after %d cycles the allocator holds %d addresses: %v", cycles, len(o), o)
	}
	if addrs, ok := e.podAddress(); ok {
		t.Errorf("after %d cycles the pod still has %s with %v", cycles, podIf, addrs)
	}
	t.Logf("%d cycles, %d distinct addresses, %d slices held", cycles, len(seen), len(e.agent.ctl.Held(hsn0.Name, testNode)))
}

// TestE2EAgentDown: with the agent stopped, ADD through macvlan fails with
// code 11 naming the socket within seconds, and so does DEL, so that the
// runtime tries again; once the agent is back, DEL cleans up and ADD works.
func TestE2EAgentDown(t *testing.T) {
	e := newE2E(t)
	net := e.network("macvlan")
	e.agent.stop()
	start := time.Now()
	_, err := e.add(net, "c1")
	took := time.Since(start)
	wantTryAgain(t, "ADD", err, e.agent.socket)
	if took > ipamwire.DefaultDialTimeout+3*time.Second {
		t.Errorf("ADD with the agent stopped took %v", took)
	}
	t.Logf("ADD with the agent stopped failed in %v: %v", took, err)
	wantTryAgain(t, "DEL", e.del(net, "c1"), e.agent.socket)

	e.agent.restart()
	// Debian's macvlan (v1.1.1) leaves its link in the pod when IPAM fails;
	// the runtime's DEL after a failed ADD is what removes it.
	if err := e.del(net, "c1"); err != nil {
		t.Fatalf("DEL once the agent is back: %v", err)
	}
	if addrs, ok := e.podAddress(); ok {
		t.Errorf("after DEL the pod still has %s with %v", podIf, addrs)
	}
	res, err := e.add(net, "c1")
	if err != nil {
		t.Fatalf("ADD once the agent is back: %v", err)
	}
	if p, _ := prefix(res.IPs[0].Address); !e.agent.inNodeSlice(p) {
		t.Errorf("ADD once the agent is back gave %v, outside the node's slices", p)
	}
}

func wantTryAgain(t *testing.T, verb string, err error, socket string) {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != ipamwire.CodeTryAgainLater || !strings.Contains(ce.Msg, socket) {
		t.Fatalf("%s with the agent stopped: %v, want code 11 naming %s", verb, err, socket)
	}
}

// TestE2EIpvlan: ipvlan with slingshot-ipam works where the kernel has
// ipvlan, and fails clearly, allocating nothing, where it does not.
func TestE2EIpvlan(t *testing.T) {
	e := newE2E(t)
	res, err := e.add(e.network("ipvlan"), "c1")
	if kernelHasIPVlan(t, e.hostNL) {
		if err != nil {
			t.Fatalf("ADD through ipvlan: %v", err)
		}
		p, _ := prefix(res.IPs[0].Address)
		if addrs, _ := e.podAddress(); !e.agent.inNodeSlice(p) || !slices.Equal(addrs, []string{p.String()}) {
			t.Errorf("ipvlan ADD gave %v, the pod carries %v", p, addrs)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "ipvlan") {
		t.Fatalf("ADD through ipvlan on a kernel without ipvlan: %v, want an error naming ipvlan", err)
	}
	if o := e.agent.owners(); len(o) != 0 {
		t.Errorf("a failed ipvlan ADD left addresses allocated: %v", o)
	}
	t.Logf("ipvlan ADD on this kernel: %v", err)
}

// kernelHasIPVlan reports whether an ipvlan link can be made on hsn0.
func kernelHasIPVlan(t testing.TB, h *netlink.Handle) bool {
	t.Helper()
	parent, err := h.LinkByName("hsn0")
	if err != nil {
		t.Fatal(err)
	}
	probe := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "ipvprobe", ParentIndex: parent.Attrs().Index}, Mode: netlink.IPVLAN_MODE_L2}
	if err := h.LinkAdd(probe); err != nil {
		return false
	}
	if err := h.LinkDel(probe); err != nil {
		t.Fatal(err)
	}
	return true
}

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// hsnPort is where the server pod listens.
const hsnPort = 7000

// TestHSNInterfaceTCP: a pod of a Job gets an hsn interface (a macvlan
// child of its NIC's hsn netdev) carrying an address of a slice of the
// pool the node holds, and a partner pod on the same node, asking for a
// fixed address of the pool by annotation, gets exactly that address and
// reaches the first pod over TCP through the interfaces. Deleting the
// Jobs releases both addresses, and no network namespace of the node
// carries them any more.
func TestHSNInterfaceTCP(t *testing.T) {
	ctx := t.Context()
	ns := env.TestNamespace(t, "hsn")
	pool := netip.MustParsePrefix(cluster.IPPoolPrefix)

	server := cluster.Job("server", 1, 1)
	server.Spec.Template.Spec.Containers[0].Args = []string{"serve", strconv.Itoa(hsnPort)}
	podsA, err := env.RunJob(ctx, ns, server)
	if err != nil {
		t.Fatal(err)
	}
	a := podsA[0]
	keyA := a.Namespace + "/" + a.Name
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hsnA := podHSN(t, rep, keyA)
	t.Logf("pod A %s: %s %s on %s", keyA, hsnA.name, hsnA.addr, hsnA.parent)
	if hsnA.name != cluster.HSNInterface || hsnA.addr.Bits() != pool.Bits() || !pool.Contains(hsnA.addr.Addr()) {
		t.Fatalf("pod A's hsn interface %s %s: want %s with an address of pool %s (%s), its prefix length", hsnA.name, hsnA.addr, cluster.HSNInterface, cluster.IPPool, pool)
	}
	if want := netdevsOf(rep, keyA); !slices.Contains(want, hsnA.parent) {
		t.Errorf("pod A's hsn interface on %s, want the hsn netdev of one of its NICs: %v", hsnA.parent, want)
	}
	if s, ok := heldSlice(rep, hsnA.addr.Addr()); !ok {
		t.Errorf("pod A's address %s lies in no slice the node holds: %+v", hsnA.addr, rep.IPAM)
	} else {
		t.Logf("in slice %d (%s) of the node", s.Index, s.Prefix)
	}
	if owners := allocationsOf(rep, hsnA.addr.Addr()); !slices.Equal(owners, []string{keyA}) {
		t.Errorf("allocations of %s: pods %v, want [%s]", hsnA.addr.Addr(), owners, keyA)
	}
	// The interface itself, in the pod's network namespace.
	pid := workloadPID(t, a)
	links, err := cluster.Links(ctx, fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := linkNamed(links, cluster.HSNInterface); !ok {
		t.Errorf("pod A's network namespace has no %s: %+v", cluster.HSNInterface, links)
	} else if l.Kind != "macvlan" || l.Mode != "bridge" || !l.Up || !slices.Equal(l.Addrs, []netip.Prefix{hsnA.addr}) {
		t.Errorf("pod A's %s: %s mode %q up=%v addresses %v; want macvlan bridge, up, carrying only %s", l.Name, l.Kind, l.Mode, l.Up, l.Addrs, hsnA.addr)
	}

	// The scan that must find nothing after the Jobs finds A's address
	// now, in A's namespace alone.
	found, err := cluster.AddressesIn(ctx, netip.PrefixFrom(hsnA.addr.Addr(), 32))
	if err != nil {
		t.Fatal(err)
	}
	netnsA, err := netns.ParseNetnsLink(mustReadlink(t, fmt.Sprintf("/proc/%d/ns/net", pid)))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Netns != netnsA || found[0].Name != cluster.HSNInterface {
		t.Errorf("network namespaces carrying %s: %+v; want %s in pod A's (%d) alone", hsnA.addr.Addr(), found, cluster.HSNInterface, netnsA)
	}

	// Pod B, with a fixed address in a slice the node does not hold yet,
	// dials A's hsn address.
	fixed := unheldAddress(t, rep, pool)
	client := cluster.Job("client", 1, 1)
	client.Spec.Template.Annotations = map[string]string{netreq.Annotation: fmt.Sprintf(`{"ip":%q}`, fixed)}
	c := &client.Spec.Template.Spec.Containers[0]
	c.Args = []string{"dial", netip.AddrPortFrom(hsnA.addr.Addr(), hsnPort).String()}
	c.Env = []corev1.EnvVar{{Name: "DIAL_TIMEOUT", Value: "60s"}}
	podsB, err := env.RunJobToCompletion(ctx, ns, client)
	if err != nil {
		t.Fatalf("%v\nserver's log:\n%s", err, env.PodLog(ctx, ns, a.Name))
	}
	b := podsB[0]
	keyB := b.Namespace + "/" + b.Name
	logB := env.PodLog(ctx, ns, b.Name)
	t.Logf("pod B %s asked for %s (the agent put it on %s); its log:\n%s", keyB, fixed, parentLogged(keyB), logB)
	wantOwn := fmt.Sprintf("%s %s", cluster.HSNInterface, netip.PrefixFrom(fixed, pool.Bits()))
	if !strings.Contains(logB, "; "+wantOwn+"\n") {
		t.Errorf("pod B's log does not show its own %s: want %q", cluster.HSNInterface, wantOwn)
	}
	// The reply names A's interface and address, and B's hsn address as
	// the caller: the connection went through both hsn interfaces.
	wantReply := fmt.Sprintf("hello from %s %s to %s:", cluster.HSNInterface, hsnA.addr, fixed)
	if !strings.Contains(logB, "reply from "+netip.AddrPortFrom(hsnA.addr.Addr(), hsnPort).String()) || !strings.Contains(logB, wantReply) {
		t.Errorf("pod B's log has no reply %q from A", wantReply)
	}
	if logA := env.PodLog(ctx, ns, a.Name); !strings.Contains(logA, wantReply) {
		t.Errorf("pod A's log has no answer %q; its log:\n%s", wantReply, logA)
	}

	// B has exited: its address is released while A keeps its own.
	if err := waitHSN(ctx, "pod B's address released at its exit", func(rep *inspect.Report) string {
		if owners := allocationsOf(rep, fixed); len(owners) > 0 {
			return fmt.Sprintf("%s held by %v", fixed, owners)
		}
		if owners := allocationsOf(rep, hsnA.addr.Addr()); !slices.Equal(owners, []string{keyA}) {
			return fmt.Sprintf("A's %s held by %v", hsnA.addr, owners)
		}
		return ""
	}); err != nil {
		t.Error(err)
	}

	// Both Jobs deleted: every address of the namespace's pods released,
	// the pods forgotten, and no network namespace of the node (the
	// agent's held ones included) carries either address.
	for _, job := range []string{"server", "client"} {
		if err := env.DeleteJob(ctx, ns, job); err != nil {
			t.Fatal(err)
		}
	}
	for _, job := range []string{"server", "client"} {
		if _, err := env.WaitPodsGone(ctx, ns, "e2e-job="+job); err != nil {
			t.Fatal(err)
		}
	}
	ours := []netip.Addr{hsnA.addr.Addr(), fixed}
	if err := waitHSN(ctx, "the pods' addresses released", func(rep *inspect.Report) string {
		for _, al := range cluster.Allocations(rep) {
			if strings.HasPrefix(al.Pod, ns+"/") || slices.Contains(ours, al.Address) {
				return fmt.Sprintf("%s held by %s (%s)", al.Address, al.Pod, al.Owner)
			}
		}
		for _, p := range rep.Pods {
			if p.Namespace == ns {
				return fmt.Sprintf("pod %s/%s %s hsn %q", p.Namespace, p.Name, p.State, p.HSN)
			}
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, pool, ours); err != nil {
		t.Fatal(err)
	}
	if rep, err = env.Inspect(ctx); err == nil {
		t.Logf("after the Jobs: %d addresses of the node allocated, slices %v", len(cluster.Allocations(rep)), slicesOf(rep))
	}
}

// hsnView is a pod's hsn interface as inspect shows it:
// "hsn0 10.150.3.7/16 on hsn1".
type hsnView struct {
	name, parent string
	addr         netip.Prefix
}

func podHSN(t *testing.T, rep *inspect.Report, key string) hsnView {
	t.Helper()
	for _, p := range rep.Pods {
		if p.Namespace+"/"+p.Name != key {
			continue
		}
		f := strings.Fields(p.HSN)
		if len(f) != 4 || f[2] != "on" {
			t.Fatalf("pod %s: hsn %q in the agent's report, want \"NAME ADDRESS/LEN on NETDEV\"", key, p.HSN)
		}
		addr, err := netip.ParsePrefix(f[1])
		if err != nil {
			t.Fatalf("pod %s: hsn %q: %v", key, p.HSN, err)
		}
		return hsnView{name: f[0], addr: addr, parent: f[3]}
	}
	t.Fatalf("pod %s is not in the agent's report: %+v", key, rep.Pods)
	return hsnView{}
}

// netdevsOf lists the hsn netdevs of the pod's NICs.
func netdevsOf(rep *inspect.Report, key string) []string {
	var out []string
	for _, p := range rep.Pods {
		if p.Namespace+"/"+p.Name != key {
			continue
		}
		for _, n := range rep.NICs {
			if slices.Contains(p.NICs, n.Name) {
				out = append(out, n.NetDev)
			}
		}
	}
	return out
}

// poolSlices lists the slices of the pool the node holds.
func poolSlices(rep *inspect.Report) []ipam.SliceInfo {
	if rep.IPAM == nil {
		return nil
	}
	for _, p := range rep.IPAM.Pools {
		if p.Name == cluster.IPPool {
			return p.Slices
		}
	}
	return nil
}

// heldSlice finds the slice of the pool the node holds that addr lies in.
func heldSlice(rep *inspect.Report, addr netip.Addr) (ipam.SliceInfo, bool) {
	for _, s := range poolSlices(rep) {
		if s.Prefix.Contains(addr) && !s.Returning {
			return s, true
		}
	}
	return ipam.SliceInfo{}, false
}

func slicesOf(rep *inspect.Report) []string {
	var out []string
	for _, s := range poolSlices(rep) {
		out = append(out, fmt.Sprintf("%d %s used %d", s.Index, s.Prefix, s.Used))
	}
	return out
}

// allocationsOf lists the pods holding addr.
func allocationsOf(rep *inspect.Report, addr netip.Addr) []string {
	var out []string
	for _, al := range cluster.Allocations(rep) {
		if al.Address == addr {
			out = append(out, al.Pod)
		}
	}
	return out
}

// unheldAddress is an address of the pool, host 7 of the first /24 from
// index 200 on that the node holds no slice of.
func unheldAddress(t *testing.T, rep *inspect.Report, pool netip.Prefix) netip.Addr {
	t.Helper()
	base := pool.Addr().As4()
	for i := 200; i < 256; i++ {
		addr := netip.AddrFrom4([4]byte{base[0], base[1], byte(i), 7})
		if _, held := heldSlice(rep, addr); !held {
			return addr
		}
	}
	t.Fatalf("the node holds every slice from 200 on: %v", slicesOf(rep))
	return netip.Addr{}
}

func workloadPID(t *testing.T, p corev1.Pod) int {
	t.Helper()
	procs, err := cluster.PodProcesses(string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range procs {
		if strings.HasSuffix(pr.Exe, "/workload") {
			return pr.Pid
		}
	}
	t.Fatalf("pod %s: no workload process among %+v", p.Name, procs)
	return 0
}

// parentLogged is the hsn netdev the agent's log says it allocated the
// pod's interface on, for a pod gone from its report.
func parentLogged(key string) string {
	files, _ := filepath.Glob(filepath.Join(env.Node.LogDir, "pods", cluster.Namespace+"_*", "agent", "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, `"msg":"hsn address allocated"`) || !strings.Contains(line, `"pod":"`+key+`"`) {
				continue
			}
			if _, rest, ok := strings.Cut(line, `"parent":"`); ok {
				parent, _, _ := strings.Cut(rest, `"`)
				return parent
			}
		}
	}
	return "an hsn netdev its log does not name"
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func linkNamed(links []cluster.Link, name string) (cluster.Link, bool) {
	for _, l := range links {
		if l.Name == name {
			return l, true
		}
	}
	return cluster.Link{}, false
}

// waitHSN polls the agent's report until pending answers "", for a
// minute; the error names what was last pending.
func waitHSN(ctx context.Context, what string, pending func(*inspect.Report) string) error {
	last := "no report"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, err := env.Inspect(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = pending(rep)
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w (last: %s)\n%s", what, err, last, env.Describe(ctx))
	}
	return nil
}

// waitGone waits until no network namespace of the node carries any of
// addrs, and the node's own namespace has no macvlan child left.
func waitGone(ctx context.Context, pool netip.Prefix, addrs []netip.Addr) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		found, err := cluster.AddressesIn(ctx, pool)
		if err != nil {
			return false, err
		}
		last = ""
		for _, l := range found {
			for _, a := range l.Addrs {
				if slices.Contains(addrs, a.Addr()) {
					last += fmt.Sprintf(" netns %d (%s): %s %s %v;", l.Netns, l.Path, l.Name, l.Kind, l.Addrs)
				}
			}
		}
		own, err := cluster.Links(ctx, "/proc/self/ns/net")
		if err != nil {
			return false, err
		}
		for _, l := range own {
			if l.Kind == "macvlan" || l.Kind == "ipvlan" {
				last += fmt.Sprintf(" the node's namespace: %s %s %v;", l.Name, l.Kind, l.Addrs)
			}
		}
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("the pods' hsn interfaces gone: %w (last:%s)", err, last)
	}
	return nil
}

// TestHSNInterfaceOnEveryNIC: with allNICs, a pod holding two NICs has
// hsn0 and hsn1, each a macvlan child of its own NIC's hsn netdev with an
// address of the pool, in the order of its SLINGSHOT_DEVICES; the agent's
// pod deleted and made again, they stay as they were (e2enri runs the
// same with a pool per rail).
func TestHSNInterfaceOnEveryNIC(t *testing.T) {
	env.CheckRailsKept(t, env.TestNamespace(t, "rails"), cluster.Job("rails", 1, 2), nil)
}

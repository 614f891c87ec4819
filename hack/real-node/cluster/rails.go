package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// HSNRails reads the hsn interfaces of the pod v and checks them against
// the NICs its container was given (devicesVar, "SLINGSHOT_DEVICES", in
// order): hsn<i> on the i-th NIC's netdev, a macvlan child of it (by the
// netdev's ifindex on the node), up, carrying exactly one address, of
// that netdev's pool (RailPool with Options.HSNRailPools, else IPPool).
// It returns the interfaces in that order.
// The parent is compared on the node this process runs in: the cluster's
// first.
func (e *Env) HSNRails(ctx context.Context, v PodView, devicesVar string) ([]Link, error) {
	ne := e.nodeNamed(v.Node)
	if ne == nil {
		return nil, fmt.Errorf("pod %s: its node %q is none of the cluster's", v.Key, v.Node)
	}
	devs := strings.Split(v.Env[devicesVar], ",")
	if v.Env[devicesVar] == "" {
		return nil, fmt.Errorf("pod %s: no %s in its environment", v.Key, devicesVar)
	}
	links, err := Links(ctx, fmt.Sprintf("/proc/%d/ns/net", v.App.Pid))
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", v.Key, err)
	}
	var out []Link
	var problems []string
	for i, dev := range devs {
		j := slices.IndexFunc(ne.Machine.NICs, func(n mocksysfs.NIC) bool { return n.Name == dev })
		if j < 0 || ne.Machine.NICs[j].NetDev == "" {
			problems = append(problems, fmt.Sprintf("%s names %s, which has no hsn netdev", devicesVar, dev))
			continue
		}
		netdev := ne.Machine.NICs[j].NetDev
		name := fmt.Sprintf("hsn%d", i)
		k := slices.IndexFunc(links, func(l Link) bool { return l.Name == name })
		if k < 0 {
			problems = append(problems, fmt.Sprintf("no %s (for %s, on %s)", name, dev, netdev))
			continue
		}
		l := links[k]
		out = append(out, l)
		if l.Kind != "macvlan" || !l.Up {
			problems = append(problems, fmt.Sprintf("%s is a %q, up=%v; want a macvlan, up", name, l.Kind, l.Up))
		}
		if ne == e.Nodes()[0] {
			parent, err := net.InterfaceByName(netdev)
			if err != nil {
				return nil, fmt.Errorf("the node's %s: %w", netdev, err)
			}
			if l.ParentIndex != parent.Index {
				problems = append(problems, fmt.Sprintf("%s's parent is ifindex %d; want %s's, %d", name, l.ParentIndex, netdev, parent.Index))
			}
		}
		pool, prefix := IPPool, netip.MustParsePrefix(IPPoolPrefix)
		if e.opts.HSNRailPools {
			pool, prefix = RailPool(netdev)
		}
		if len(l.Addrs) != 1 || l.Addrs[0].Bits() != prefix.Bits() || !prefix.Contains(l.Addrs[0].Addr()) {
			problems = append(problems, fmt.Sprintf("%s carries %v; want one address of pool %s (%s)", name, l.Addrs, pool, prefix))
		}
	}
	if extra := slices.IndexFunc(links, func(l Link) bool { return l.Name == fmt.Sprintf("hsn%d", len(devs)) }); extra >= 0 {
		problems = append(problems, fmt.Sprintf("an hsn%d beyond its %d NICs", len(devs), len(devs)))
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("pod %s's hsn interfaces (%s=%s): %s", v.Key, devicesVar, v.Env[devicesVar], strings.Join(problems, "; "))
	}
	return out, nil
}

// CheckRailsKept runs a Job of one pod of two NICs in the namespace ns
// and checks its hsn interfaces (HSNRails) before and after the agent's
// pod is deleted and made again: the same interfaces, addresses and
// MACs. check, when not nil, checks more of the pod and its interfaces
// (in SLINGSHOT_DEVICES order) at both times.
func (e *Env) CheckRailsKept(t *testing.T, ns string, job *batchv1.Job, check func(pod corev1.Pod, rails []Link)) {
	t.Helper()
	ctx := t.Context()
	pods, err := e.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.HSNRails(ctx, e.ViewPod(t, pods[0]), "SLINGSHOT_DEVICES")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 {
		t.Fatalf("%d hsn interfaces for a pod of two NICs: %+v", len(before), before)
	}
	t.Logf("pod %s/%s: %+v", ns, pods[0].Name, before)
	if check != nil {
		check(pods[0], before)
	}
	if err := e.ReplaceAgentPod(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := e.HSNRails(ctx, e.ViewPod(t, pods[0]), "SLINGSHOT_DEVICES")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("after the agent's restart: %+v, want %+v", after, before)
	}
	if check != nil {
		check(pods[0], after)
	}
}

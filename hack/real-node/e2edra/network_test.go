package e2edra

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRANetworkData: a pod whose claim holds two NICs has hsn0 and
// hsn1, each a macvlan child of its own NIC's hsn netdev with an address
// of that netdev's pool, in the order of its SLINGSHOT_DEVICES; the
// claim's status.devices[].networkData names, for each NIC, the
// interface, its address and its hardware address, as `ip addr` in the
// pod shows them. The agent's pod deleted and made again, they stay.
func TestDRANetworkData(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-rails")
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.NICClaimTemplate("rails", 2, "pod"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := env.RunJob(ctx, ns, cluster.ClaimJob("rails", 1, "rails"))
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, pods[0])
	links, err := env.HSNRails(ctx, v.PodView, "SLINGSHOT_DEVICES")
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 || len(v.Claims) != 1 {
		t.Fatalf("%d hsn interfaces, %d claims for a pod of one claim of two NICs: %+v", len(links), len(v.Claims), links)
	}
	want := map[string]resourcev1.NetworkDeviceData{}
	for i, dev := range v.Devices {
		want[dev] = resourcev1.NetworkDeviceData{InterfaceName: links[i].Name, IPs: []string{links[i].Addrs[0].String()}, HardwareAddress: links[i].MAC}
	}
	claim := v.Claims[0]
	start := time.Now()
	got, err := waitNetworkData(ctx, ns, claim.Name, want)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim %s: networkData %+v, seen %s after the pod ran", claim.Name, got, time.Since(start).Round(time.Millisecond))

	if err := env.ReplaceAgentPod(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := env.HSNRails(ctx, viewDRAPod(t, ctx, pods[0]).PodView, "SLINGSHOT_DEVICES")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, links) {
		t.Fatalf("after the agent's restart: %+v, want %+v", after, links)
	}
	if _, err := waitNetworkData(ctx, ns, claim.Name, want); err != nil {
		t.Fatalf("after the agent's restart: %v", err)
	}
}

// waitNetworkData waits until claim name's status has, for each of this
// driver's devices, the network data want has for it, and no other.
func waitNetworkData(ctx context.Context, ns, name string, want map[string]resourcev1.NetworkDeviceData) (map[string]resourcev1.NetworkDeviceData, error) {
	var got map[string]resourcev1.NetworkDeviceData
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := env.Node.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = map[string]resourcev1.NetworkDeviceData{}
		for _, d := range c.Status.Devices {
			if d.Driver == cluster.DRADriver && d.NetworkData != nil {
				got[d.Device] = *d.NetworkData
			}
		}
		return reflect.DeepEqual(got, want), nil
	})
	if err != nil {
		return got, fmt.Errorf("claim %s/%s's networkData %+v, want %+v (as ip addr shows in the pod): %w", ns, name, got, want, err)
	}
	return got, nil
}

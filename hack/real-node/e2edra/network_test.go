package e2edra

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	env.CheckRailsKept(t, ns, cluster.ClaimJob("rails", 1, "rails"), func(pod corev1.Pod, rails []cluster.Link) {
		t.Helper()
		v := viewDRAPod(t, ctx, pod)
		if len(v.Claims) != 1 {
			t.Fatalf("%d claims for a pod of one claim of two NICs", len(v.Claims))
		}
		want := map[string]resourcev1.NetworkDeviceData{}
		for i, dev := range v.Devices {
			want[dev] = resourcev1.NetworkDeviceData{InterfaceName: rails[i].Name, IPs: []string{rails[i].Addrs[0].String()}, HardwareAddress: rails[i].MAC}
		}
		start := time.Now()
		got, err := waitNetworkData(ctx, ns, v.Claims[0].Name, want)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("claim %s: networkData %+v, waited %s for it", v.Claims[0].Name, got, time.Since(start).Round(time.Millisecond))
	})
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

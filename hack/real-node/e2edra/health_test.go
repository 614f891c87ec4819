package e2edra

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// healthWithin is how soon a NIC's netdev going down or up must show on its
// device (issue 34): well under the agent's 10 s sysfs poll, so only the
// netlink link event can meet it.
const healthWithin = 2 * time.Second

// TestDRALinkEventTaintsDeviceWithin2s: a NIC's hsn netdev (a real veth of
// the node) set down with ip link, its mock sysfs showing what the kernel
// then shows (operstate down, carrier 0) a moment before, puts the
// driver's unhealthy taint on the NIC's device in the ResourceSlice within
// 2 s; set up again, the taint goes within 2 s. Twice, so that a poll
// falling in the window cannot pass it by chance.
func TestDRALinkEventTaintsDeviceWithin2s(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	if _, err := env.WaitResourceSlices(ctx, env.PhysicalNICs()); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(env.Machine.NICs, func(n mocksysfs.NIC) bool { return !n.VF && n.NetDev != "" })
	if i < 0 {
		t.Fatal("the mock machine has no NIC with an hsn netdev")
	}
	nic := env.Machine.NICs[i]
	t.Cleanup(func() {
		_ = mocksysfs.SetOperState(env.Machine.Dir, nic.NetDev, true)
		_ = exec.Command("ip", "link", "set", nic.NetDev, "up").Run()
	})
	for round := 1; round <= 2; round++ {
		for _, up := range []bool{false, true} {
			state := map[bool]string{false: "down", true: "up"}[up]
			if err := mocksysfs.SetOperState(env.Machine.Dir, nic.NetDev, up); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if out, err := exec.CommandContext(ctx, "ip", "link", "set", nic.NetDev, state).CombinedOutput(); err != nil {
				t.Fatalf("ip link set %s %s: %v: %s", nic.NetDev, state, err, out)
			}
			took, err := waitTainted(ctx, nic.Name, !up, start, 10*time.Second)
			if err != nil {
				t.Fatalf("round %d, %s set %s: %v\n%s", round, nic.NetDev, state, err, env.Describe(ctx))
			}
			t.Logf("round %d: %s set %s: device %s %s after %v", round, nic.NetDev, state, nic.Name,
				map[bool]string{true: "untainted", false: "tainted"}[up], took.Round(time.Millisecond))
			if took > healthWithin {
				t.Errorf("round %d: %s set %s showed on device %s after %v, want within %v", round, nic.NetDev, state, nic.Name, took, healthWithin)
			}
		}
	}
}

// waitTainted waits until device's unhealthy taint is there (tainted) or
// not in the node's ResourceSlices, and returns how long after since.
func waitTainted(ctx context.Context, device string, tainted bool, since time.Time, limit time.Duration) (time.Duration, error) {
	key := cluster.DRADriver + "/unhealthy" // agent/dra.TaintKey
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		rs, err := env.ResourceSlices(ctx)
		if err != nil {
			return false, nil
		}
		for _, s := range rs {
			for _, d := range s.Spec.Devices {
				if d.Name == device {
					has := slices.ContainsFunc(d.Taints, func(tn resourcev1.DeviceTaint) bool { return tn.Key == key })
					return has == tainted, nil
				}
			}
		}
		return false, nil
	})
	return time.Since(since), err
}

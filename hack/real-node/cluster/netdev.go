package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// NICWithNetdev is the first physical NIC of the mock machine with an hsn
// netdev, a real veth of the node.
func (e *Env) NICWithNetdev() (mocksysfs.NIC, error) {
	i := slices.IndexFunc(e.Machine.NICs, func(n mocksysfs.NIC) bool { return !n.VF && n.NetDev != "" })
	if i < 0 {
		return mocksysfs.NIC{}, errors.New("the mock machine has no NIC with an hsn netdev")
	}
	return e.Machine.NICs[i], nil
}

// SetNetdev sets the node's hsn netdev down or up with ip link, as an
// admin would, the mock sysfs tree showing what the kernel then shows
// (operstate and carrier) a moment before: the kernel changes them before
// it sends the link event the agent reacts to.
func (e *Env) SetNetdev(ctx context.Context, netdev string, up bool) error {
	if err := mocksysfs.SetOperState(e.Machine.Dir, netdev, up); err != nil {
		return err
	}
	state := "down"
	if up {
		state = "up"
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "set", netdev, state).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s %s: %w: %s", netdev, state, err, out)
	}
	return nil
}

// FlapNetdev sets netdev down, then up, rounds times (SetNetdev), and
// after each change calls shown, which returns once the change shows
// where the caller looks (up: whether the netdev is up now). It returns
// how long each change took to show, from its start, in order: down, up,
// down, ... The netdev is left up, also on an error.
func (e *Env) FlapNetdev(ctx context.Context, netdev string, rounds int, shown func(ctx context.Context, up bool) error) (took []time.Duration, err error) {
	defer func() {
		// A netdev left down would fail the tests after this one.
		if rerr := e.SetNetdev(context.WithoutCancel(ctx), netdev, true); rerr != nil {
			err = errors.Join(err, fmt.Errorf("set %s up again: %w", netdev, rerr))
		}
	}()
	for round := 1; round <= rounds; round++ {
		for _, up := range []bool{false, true} {
			start := time.Now()
			if err = e.SetNetdev(ctx, netdev, up); err != nil {
				return took, err
			}
			if err = shown(ctx, up); err != nil {
				return took, fmt.Errorf("round %d, %s set up=%v: %w", round, netdev, up, err)
			}
			took = append(took, time.Since(start))
		}
	}
	return took, nil
}

// RailPool is the IP pool of the interfaces on netdev with HSNAllNICs:
// hsn0's is IPPool; hsnN's is its own, "hsnN" of 10.(150+N).0.0/16.
func RailPool(netdev string) (name string, prefix netip.Prefix) {
	n, err := strconv.Atoi(strings.TrimPrefix(netdev, "hsn"))
	if err != nil || n == 0 {
		return IPPool, netip.MustParsePrefix(IPPoolPrefix)
	}
	return netdev, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(150 + n), 0, 0}), 16)
}

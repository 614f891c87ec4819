package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// Leftover says what of some pods' state the node or the cluster still
// has, "" when nothing: one part of what cleanup means, which differs by
// the agent's front end (the agent's records of pods with the device
// plugin; the driver's services, CDI specs and claims with DRA). An error
// is a read that failed, retried like a leftover.
type Leftover func(ctx context.Context) (string, error)

// Cleanup is what WaitCleanedUp waits for.
type Cleanup struct {
	// VNI is the pods' VNI, whose hold by this node the controller must
	// have dropped; 0 when there is none to check (pods refused before
	// they had one).
	VNI uint16
	// Leftovers must all come back empty.
	Leftovers []Leftover
	// Interval and Timeout of the poll: the device-plugin suite polls
	// often, since it measures the cleanup's lag; the DRA suite's reads
	// are more (files, claims) and its cleanups longer (restarts).
	Interval, Timeout time.Duration
}

// WaitCleanedUp waits until nothing of c.Leftovers remains and the
// controller no longer lists this node among the holders of c.VNI, and
// returns when that was first seen (for the lag after the pods were gone).
// Its error says what was still there, and the node's state.
func (e *Env) WaitCleanedUp(ctx context.Context, c Cleanup) (time.Time, error) {
	var last string
	err := wait.PollUntilContextTimeout(ctx, c.Interval, c.Timeout, true, func(ctx context.Context) (bool, error) {
		for _, left := range c.Leftovers {
			what, err := left(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if what != "" {
				last = what
				return false, nil
			}
		}
		if c.VNI == 0 {
			return true, nil
		}
		holders, err := e.VNIHolders(ctx, c.VNI)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if slices.Contains(holders, e.Node.Name) {
			last = fmt.Sprintf("VNI %d still held by %v", c.VNI, holders)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("cleanup: %w (last: %s)\n%s", err, last, e.Describe(ctx))
	}
	return time.Now(), nil
}

// ReportedPods is the device plugin's cleanup as the agent reports it: no
// service, no pod record and no hsn address of any of pods
// ("namespace/name") left in its report.
func (e *Env) ReportedPods(pods []string) Leftover {
	return func(ctx context.Context) (string, error) {
		rep, err := e.Inspect(ctx)
		if err != nil {
			return "", err
		}
		for _, s := range rep.Services {
			if slices.Contains(pods, s.Pod) {
				return fmt.Sprintf("service %s/%d of %s", s.NIC, s.ID, s.Pod), nil
			}
		}
		for _, p := range rep.Pods {
			if slices.Contains(pods, p.Namespace+"/"+p.Name) {
				return fmt.Sprintf("pod %s/%s %s", p.Namespace, p.Name, p.State), nil
			}
		}
		for _, al := range Allocations(rep) {
			if slices.Contains(pods, al.Pod) {
				return fmt.Sprintf("hsn address %s of %s", al.Address, al.Pod), nil
			}
		}
		return "", nil
	}
}

// Allocations are the hsn addresses the agent's report lists, none when
// it serves no IPAM.
func Allocations(rep *inspect.Report) []ipam.Allocation {
	if rep.IPAM == nil {
		return nil
	}
	return rep.IPAM.Allocations
}

// DriverServicesGone is cleanup as the driver sees it: none of svcs is in
// the node's simulated driver any more.
func (e *Env) DriverServicesGone(svcs []simstate.Service) Leftover {
	return func(context.Context) (string, error) {
		for _, s := range svcs {
			if _, ok, err := simstate.Find(e.SimStateDir, s.NIC, s.ID); ok || err != nil {
				return fmt.Sprintf("service %s/%d still in the driver (%v)", s.NIC, s.ID, err), nil
			}
		}
		return "", nil
	}
}

// DriverEmpty is cleanup as the driver sees it when no pod holds a NIC:
// no service left on any NIC of the node but the driver's own, the
// default service and system services.
func (e *Env) DriverEmpty() Leftover {
	return e.driverLeft("services left in the driver", func(simstate.Service) bool { return true })
}

// DriverVNIGone is cleanup of a Job's VNI as the node's driver sees it:
// no service on any NIC of the node carries vni any more, the driver's
// own aside. It finds the services whoever made them and whatever their
// IDs became (a service made again takes a new one), where
// DriverServicesGone needs them named.
func (e *Env) DriverVNIGone(vni uint16) Leftover {
	return e.driverLeft(fmt.Sprintf("services of VNI %d left in the driver", vni), func(s simstate.Service) bool {
		return slices.Contains(s.VNIs, vni)
	})
}

// driverLeft is a Leftover of the services of the node's driver that
// match, the driver's own (the default service and system services)
// aside: those only the agent makes and destroys.
func (e *Env) driverLeft(what string, match func(simstate.Service) bool) Leftover {
	return func(context.Context) (string, error) {
		svcs, err := e.DriverServices()
		if err != nil {
			return "", err
		}
		var left []string
		for _, s := range svcs {
			if s.ID != uapi.DefaultSvcID && !s.System && match(s) {
				left = append(left, fmt.Sprintf("%s/%d (vnis %v, netns %v)", s.NIC, s.ID, s.VNIs, s.NetNS))
			}
		}
		if len(left) > 0 {
			return fmt.Sprintf("%s: %s: %v", e.Node.Name, what, left), nil
		}
		return "", nil
	}
}

// VNIsReleased is cleanup at the controller: no lease carries any of
// vnis any more (the controller freed them, into quarantine).
func (e *Env) VNIsReleased(vnis ...uint16) Leftover {
	return func(ctx context.Context) (string, error) {
		resp, err := e.VNIs(ctx)
		if err != nil {
			return "", err
		}
		for _, l := range resp.Leases {
			if slices.Contains(vnis, uint16(l.Vni)) {
				return fmt.Sprintf("VNI %d still leased to %s/%s (nodes %v, owner gone %v)", l.Vni, l.GetOwner().GetNamespace(), l.GetOwner().GetName(), l.Nodes, l.OwnerGone), nil
			}
		}
		return "", nil
	}
}

// VNIsQuarantined is the end of cleanup at the controller: each of vnis
// freed into quarantine, where it waits out a while before it can be
// handed out again (VNIsReleased sees it freed, not where it went).
func (e *Env) VNIsQuarantined(vnis ...uint16) Leftover {
	return func(ctx context.Context) (string, error) {
		resp, err := e.VNIs(ctx)
		if err != nil {
			return "", err
		}
		for _, vni := range vnis {
			if !slices.ContainsFunc(resp.Quarantined, func(q *apiv1.QuarantinedVNI) bool { return uint16(q.Vni) == vni }) {
				return fmt.Sprintf("VNI %d not in quarantine (leases %v, quarantined %v)", vni, resp.Leases, resp.Quarantined), nil
			}
		}
		return "", nil
	}
}

// FilesGone is cleanup of files the agent wrote (CDI specs): none of paths
// exists any more. A stat that fails otherwise than "not found" counts as
// left: it proves nothing gone.
func FilesGone(what string, paths []string) Leftover {
	return func(context.Context) (string, error) {
		for _, p := range paths {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				return fmt.Sprintf("%s %s still there (%v)", what, p, err), nil
			}
		}
		return "", nil
	}
}

// ClaimsGone is DRA's cleanup at the API server: none of claims exists
// any more (the ResourceClaim controller deletes a template's claims with
// their pod).
func (e *Env) ClaimsGone(claims []*resourcev1.ResourceClaim) Leftover {
	return func(ctx context.Context) (string, error) {
		for _, c := range claims {
			_, err := e.Node.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Sprintf("claim %s/%s still there (%v)", c.Namespace, c.Name, err), nil
			}
		}
		return "", nil
	}
}

// HoldsFor reads what changed of a state (through changed, "" when
// nothing) every 250 ms for d and returns an error at the first change:
// what a restart must not do, it would do in that window, and one look
// after it could miss a change undone meanwhile.
func (e *Env) HoldsFor(ctx context.Context, d time.Duration, changed func(ctx context.Context) string) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if diff := changed(ctx); diff != "" {
			return fmt.Errorf("the node's state changed:\n%s\n%s", diff, e.Describe(ctx))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}

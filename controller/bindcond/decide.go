// Package bindcond writes the binding conditions of the agent's DRA NIC
// devices (package internal/draclaim): once the scheduler has allocated a
// claim such a device and reserved it for a pod, the controller leases
// the claim's VNI for the node the claim is allocated on, as the node's
// agent will at Prepare, and says so in the claim's status; the scheduler
// binds the pod to the node only then. It says the lease failed (and the
// scheduler gives the node up) when the controller refuses it, when the
// claim's configuration is malformed, or when the node's agent has not
// been heard for a while: a job's pods do not land on a node whose agent
// cannot reach the controller. While the controller is down nothing is
// written, the pods wait unbound, and no Prepare fails.
//
// The lease acquired here is the node's, as the agent's own acquire would
// make it; the agent's acquire at Prepare finds it (acquires are
// idempotent). A pod that never comes to the node leaves the node a hold
// it never uses, which the controller drops once the node's heartbeats
// report the VNI unused (controller.ReportVNIsInUse).
package bindcond

import (
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// Reasons of the conditions written.
const (
	ReasonLeased                = "Leased"
	ReasonLeaseRefused          = "LeaseRefused"
	ReasonInvalidConfig         = "InvalidConfig"
	ReasonNodeAgentUnreachable  = "NodeAgentUnreachable"
	ReasonControllerUnavailable = "ControllerUnavailable"
)

// Device is one allocated device of a claim, as its status entry is keyed.
type Device struct {
	Pool, Device string
	ShareID      string // "" for none
}

// awaiting are the claim's devices of driver that wait for a binding
// condition this package writes: allocated with ConditionVNILeased among
// their binding conditions, and with neither condition true in the status.
// A claim with none needs nothing.
func awaiting(claim *resourceapi.ResourceClaim, driver string) []Device {
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil
	}
	var out []Device
	for _, r := range alloc.Devices.Results {
		if r.Driver != driver || !slices.Contains(r.BindingConditions, draclaim.ConditionVNILeased) {
			continue
		}
		d := Device{Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
		}
		if st := statusOf(claim, driver, d); st != nil &&
			(apimeta.IsStatusConditionTrue(st.Conditions, draclaim.ConditionVNILeased) ||
				apimeta.IsStatusConditionTrue(st.Conditions, draclaim.ConditionVNILeaseFailed)) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// statusOf is the claim's status entry of device d of driver, or nil.
func statusOf(claim *resourceapi.ResourceClaim, driver string, d Device) *resourceapi.AllocatedDeviceStatus {
	for i := range claim.Status.Devices {
		st := &claim.Status.Devices[i]
		share := ""
		if st.ShareID != nil {
			share = *st.ShareID
		}
		if st.Driver == driver && st.Pool == d.Pool && st.Device == d.Device && share == d.ShareID {
			return st
		}
	}
	return nil
}

// nodeOf is the one node the claim's allocation is on: the scheduler
// selects a node-local device's node by metadata.name.
func nodeOf(alloc *resourceapi.AllocationResult) (string, bool) {
	if alloc == nil || alloc.NodeSelector == nil || len(alloc.NodeSelector.NodeSelectorTerms) != 1 {
		return "", false
	}
	term := alloc.NodeSelector.NodeSelectorTerms[0]
	for _, f := range term.MatchFields {
		if f.Key == "metadata.name" && string(f.Operator) == "In" && len(f.Values) == 1 {
			return f.Values[0], true
		}
	}
	return "", false
}

// firstPod is the first pod the claim is reserved for.
func firstPod(claim *resourceapi.ResourceClaim) (controller.PodRef, bool) {
	pods := draclaim.ReservedPods(claim)
	if len(pods) == 0 {
		return controller.PodRef{}, false
	}
	return controller.PodRef{Namespace: pods[0].Namespace, Name: pods[0].Name, UID: pods[0].UID}, true
}

// verdict is what a claim's awaiting devices are to be told, or that it
// must wait and be looked at again.
type verdict struct {
	// wait: write nothing now; look again after retryAfter (0: on the
	// claim's next change only).
	wait       bool
	retryAfter time.Duration
	// lease: acquire the VNI of pod for node with policy, then write.
	lease  bool
	pod    controller.PodRef
	node   string
	policy string
	// failed, reason and message: the condition to write without a
	// lease.
	failed          bool
	reason, message string
}

// nodeClock is what decide reads of the node's agent and of time.
type nodeClock struct {
	now      time.Time
	loadedAt time.Time                           // when this controller's state was loaded
	seen     func(node string) (time.Time, bool) // the node's last heartbeat
	stale    time.Duration                       // 0: never judged unreachable
}

// decide is what to do for a claim whose devices await.
func decide(claim *resourceapi.ResourceClaim, driver string, c nodeClock) verdict {
	node, ok := nodeOf(claim.Status.Allocation)
	if !ok {
		return verdict{failed: true, reason: ReasonInvalidConfig,
			message: "the claim's allocation names no single node by metadata.name: the VNI is leased per node"}
	}
	pod, ok := firstPod(claim)
	switch {
	case !ok && len(claim.Status.ReservedFor) > 0:
		// A PodGroup's claim of NICs (docs/dra.md#podgroup-claims): NICs
		// are node-local, so it could serve one node's pods only, and the
		// agent's Prepare refuses it; a group's claim is of the fabric's
		// VNI device, which carries no binding conditions.
		ref := claim.Status.ReservedFor[0]
		return verdict{failed: true, reason: ReasonInvalidConfig,
			message: fmt.Sprintf("the claim is reserved for %s %s, not a pod: the driver serves claims of pods", ref.Resource, ref.Name)}
	case !ok:
		// The scheduler reserves the claim for its pod as it
		// allocates it; a change will bring it.
		return verdict{wait: true}
	}
	cfg, err := draclaim.ConfigOf(claim, driver)
	if err != nil {
		return verdict{failed: true, reason: ReasonInvalidConfig, message: err.Error()}
	}
	// A controller that loaded less than a stale period ago has not had
	// every agent's heartbeat yet (the agents cannot reach a controller
	// that was down): it leases, as it cannot judge.
	if c.stale > 0 && c.now.Sub(c.loadedAt) >= c.stale {
		last, heard := c.seen(node)
		switch {
		case heard && c.now.Sub(last) <= c.stale:
		case heard:
			return unreachable(node, c.stale, fmt.Sprintf("last %s ago", c.now.Sub(last).Round(time.Second)))
		default:
			// Never heard: an agent that has just started may not
			// have spoken yet; the claim waits for it a stale period
			// from its allocation.
			if ts := claim.Status.Allocation.AllocationTimestamp; ts != nil && c.now.Sub(ts.Time) < c.stale {
				return verdict{wait: true, retryAfter: min(c.stale-c.now.Sub(ts.Time), time.Second)}
			}
			return unreachable(node, c.stale, "never since the controller started")
		}
	}
	return verdict{lease: true, pod: pod, node: node, policy: cfg.VNI}
}

func unreachable(node string, stale time.Duration, when string) verdict {
	return verdict{failed: true, reason: ReasonNodeAgentUnreachable,
		message: fmt.Sprintf("the slingshot agent of node %s has not reached the controller for %s (%s): its pods could not lease their VNIs", node, stale, when)}
}

// leaseVerdict is what an acquire's outcome writes: true with the lease,
// failed with a refusal, nothing (retry) while the controller is
// unavailable.
func leaseVerdict(l controller.Lease, node string, err error) (cond bool, reason, message string, retry bool) {
	switch {
	case err == nil:
		return true, ReasonLeased, leaseMessage(l, node), false
	case errors.Is(err, controller.ErrUnavailable):
		return false, ReasonControllerUnavailable, err.Error(), true
	default:
		return false, ReasonLeaseRefused, err.Error(), false
	}
}

func leaseMessage(l controller.Lease, node string) string {
	switch {
	case l.Scope == controller.ScopeNone:
		return "no VNI: the claim's vni is none"
	case l.FromNodeSlice:
		return fmt.Sprintf("a pod VNI from node %s's slice", node)
	default:
		return fmt.Sprintf("VNI %d (%s lease %s) held for node %s", l.VNI, l.Scope, l.Key, node)
	}
}

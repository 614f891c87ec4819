package engine

import (
	"context"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// Leaser leases VNIs from the controller; *controllerclient.Client is one.
type Leaser interface {
	AcquireJobVNI(ctx context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error)
	ReleaseJobVNI(ctx context.Context, lease controllerclient.Lease) error
}

// Leases acquires and releases the node's leases for its local holders:
// the controller records a lease as held by the node, so the node's hold
// goes with the lease's last local holder. A holder is a key unique on
// the node: a pod's "namespace/name", a claim's [ClaimHolder].
//
// No lock is held across a call to the controller: a slow answer delays
// only the holders of the same lease, and only where they must wait (an
// acquire waits for a release of its lease that is in flight). Its
// methods are safe for concurrent use.
type Leases struct {
	leaser Leaser
	holds  *leaseHolds
}

// NewLeases returns the holds of a node with no holder yet.
func NewLeases(l Leaser) *Leases { return &Leases{leaser: l, holds: newLeaseHolds()} }

// ClaimHolder is a DRA claim's holder key: it cannot be a pod's, which has
// no colon.
func ClaimHolder(uid string) string { return "claim:" + uid }

// Restore counts holder as a holder of lease key, as the durable record
// says at start, before any acquire or release runs.
func (l *Leases) Restore(key, holder string) { l.holds.restore(key, holder) }

// Acquire leases pod's VNI and counts holder among the lease's holders.
// A release of the same lease by its last other holder may have crossed
// this acquire at the controller; then it acquires again, once.
func (l *Leases) Acquire(ctx context.Context, holder string, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	since := l.holds.begin()
	lease, err := l.leaser.AcquireJobVNI(ctx, pod)
	if err != nil {
		l.holds.abandon(since)
		return lease, err
	}
	if l.holds.add(lease.Key, holder, since) {
		return lease, nil
	}
	again, err := l.leaser.AcquireJobVNI(ctx, pod)
	if err == nil && again.VNI != lease.VNI {
		err = fmt.Errorf("the controller answered VNI %d, then %d", lease.VNI, again.VNI)
	}
	if err != nil {
		if rerr := l.Release(ctx, holder, lease); rerr != nil {
			err = fmt.Errorf("%w (and its release: %w)", err, rerr)
		}
		return lease, fmt.Errorf("acquire again, after a release of the lease crossed: %w", err)
	}
	return again, nil
}

// Release drops holder's hold on lease, and the node's hold at the
// controller with the last local holder. A nil error means holder no
// longer needs releasing it; an error means the release failed and
// holder counts as dropped: calling Release again retries it.
func (l *Leases) Release(ctx context.Context, holder string, lease controllerclient.Lease) error {
	if !l.holds.drop(lease.Key, holder) {
		return nil // other holders on this node run on the VNI
	}
	defer l.holds.done(lease.Key)
	if lease.Scope == controllerclient.ScopeNone || lease.Key == "" && !lease.Local {
		return nil // nothing held at the controller
	}
	if err := l.leaser.ReleaseJobVNI(ctx, lease); err != nil {
		return fmt.Errorf("release VNI %d (lease %s): %w", lease.VNI, lease.Key, err)
	}
	return nil
}

// Holders counts the local holders of lease key.
func (l *Leases) Holders(key string) int {
	h := l.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.leases[key]; e != nil {
		return len(e.pods)
	}
	return 0
}

package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

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
// the node: a pod's "namespace/name", a claim's checkpoint.ClaimID.
//
// No lock is held across a call to the controller: a slow answer delays
// only the holders of the same lease, and only where they must wait (an
// acquire waits for a release of its lease that is in flight). Its
// methods are safe for concurrent use.
type Leases struct {
	leaser Leaser
	holds  *leaseHolds

	mu sync.Mutex // guards shared and asking
	// shared maps a job's share key to the job-scoped lease its first
	// holder on this node was answered, while a holder holds it.
	shared map[string]controllerclient.Lease
	// asking holds, by share key, the controller call in flight for it:
	// the job's other pods admitted at once wait for its answer rather
	// than each ask (a gang start).
	asking map[string]chan struct{}
}

// NewLeases returns the holds of a node with no holder yet.
func NewLeases(l Leaser) *Leases {
	return &Leases{leaser: l, holds: newLeaseHolds(), shared: map[string]controllerclient.Lease{}, asking: map[string]chan struct{}{}}
}

// Restore counts holder as a holder of lease key, as the durable record
// says at start, before any acquire or release runs.
func (l *Leases) Restore(key, holder string) { l.holds.restore(key, holder) }

// Acquire leases pod's VNI and counts holder among the lease's holders.
// A release of the same lease by its last other holder may have crossed
// this acquire at the controller; then it acquires again, once.
func (l *Leases) Acquire(ctx context.Context, holder string, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	return l.AcquireShared(ctx, holder, pod, "")
}

// AcquireShared is Acquire for a pod whose job the node knows: share
// names it (see [ShareKey]; "" for none). While another local holder of
// the same share holds a job-scoped lease, holder joins it with no call
// to the controller: the controller records a job's lease as held by the
// node, which holds it already, so it would answer the same lease. This
// makes a gang start cost one controller call per node per job.
func (l *Leases) AcquireShared(ctx context.Context, holder string, pod controllerclient.PodRef, share string) (controllerclient.Lease, error) {
	if lease, ok := l.joinShared(holder, share); ok {
		return lease, nil
	}
	if share == "" {
		return l.acquire(ctx, holder, pod, "")
	}
	// One call per share at a time: the first asks, the others wait for
	// its answer and join it (or, when it was no job's lease or failed,
	// ask in turn).
	for {
		l.mu.Lock()
		wait, busy := l.asking[share]
		if !busy {
			done := make(chan struct{})
			l.asking[share] = done
			l.mu.Unlock()
			lease, err := l.acquire(ctx, holder, pod, share)
			l.mu.Lock()
			delete(l.asking, share)
			l.mu.Unlock()
			close(done)
			return lease, err
		}
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return controllerclient.Lease{}, fmt.Errorf("wait for the job's lease on this node: %w", ctx.Err())
		}
		if lease, ok := l.joinShared(holder, share); ok {
			return lease, nil
		}
	}
}

// acquire asks the controller for pod's lease and counts holder, and
// remembers a job-scoped answer for share.
func (l *Leases) acquire(ctx context.Context, holder string, pod controllerclient.PodRef, share string) (controllerclient.Lease, error) {
	since := l.holds.begin()
	lease, err := l.leaser.AcquireJobVNI(ctx, pod)
	if err != nil {
		l.holds.abandon(since)
		return lease, err
	}
	if l.holds.add(lease.Key, holder, since) {
		l.remember(share, lease)
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
	l.remember(share, again)
	return again, nil
}

// joinShared counts holder among the holders of the lease remembered for
// share, when one is and other holders hold it with no release in
// flight; it reports whether it did.
func (l *Leases) joinShared(holder, share string) (controllerclient.Lease, bool) {
	if share == "" {
		return controllerclient.Lease{}, false
	}
	l.mu.Lock()
	lease, ok := l.shared[share]
	l.mu.Unlock()
	if !ok || !l.holds.join(lease.Key, holder) {
		return controllerclient.Lease{}, false
	}
	return lease, true
}

// remember keeps a job-scoped lease for share's next holders. Only a job
// scope is shared: a pod, claim or no scope is each holder's own.
func (l *Leases) remember(share string, lease controllerclient.Lease) {
	if share == "" || lease.Scope != controllerclient.ScopeJob || lease.Key == "" || lease.Local {
		return
	}
	l.mu.Lock()
	l.shared[share] = lease
	l.mu.Unlock()
}

// forgetShared drops the shares of lease key, once its last holder went.
func (l *Leases) forgetShared(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for share, lease := range l.shared {
		if lease.Key == key {
			delete(l.shared, share)
		}
	}
}

// ShareKey names a pod's job for AcquireShared from what the runtime
// knows of the pod: its namespace, the UID of the Job controlling it
// (the label batch.kubernetes.io/controller-uid the Job controller puts on
// its pods) and the annotations that change the answer the controller
// gives (the VNI policy and the network request), so that two pods share
// only what the controller would have answered both. "" when the pod is
// no Job's.
func ShareKey(namespace string, labels, annotations map[string]string) string {
	job := labels["batch.kubernetes.io/controller-uid"]
	if job == "" {
		job = labels["controller-uid"] // the Job controller's label before Kubernetes 1.27
	}
	if job == "" || namespace == "" {
		return ""
	}
	return strings.Join([]string{namespace, job, annotations["slingshot.hpe.com/vni"], annotations["slingshot.hpe.com/network"]}, "\x00")
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
	l.forgetShared(lease.Key)
	if lease.Scope == controllerclient.ScopeNone || lease.Key == "" && !lease.Local {
		return nil // nothing held at the controller
	}
	if err := l.leaser.ReleaseJobVNI(ctx, lease); err != nil {
		return fmt.Errorf("release VNI %d (lease %s): %w", lease.VNI, lease.Key, err)
	}
	return nil
}

// Holders counts the local holders of lease key.
func (l *Leases) Holders(key string) int { return l.holds.count(key) }

package dra

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// ClaimReader reads a ResourceClaim from the API server; an error that
// apierrors.IsNotFound matches means it does not exist.
type ClaimReader interface {
	GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// APIClaims reads claims through a clientset.
type APIClaims struct{ Client kubernetes.Interface }

// GetClaim reads namespace/name.
func (a APIClaims) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return a.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Collector unprepares the claims the kubelet will never unprepare: it
// lost its claim state (a wiped /var/lib/kubelet, a node rebuilt under
// the same name), so the VNI holds would leak. Doubt never destroys: a
// claim is collected only on proof, two successful reads at least Grace
// apart that both say the API server no longer allocates the claim to
// this node (it is gone, was made again under another UID, or its
// allocation names none of this node's devices). A failed read proves
// nothing and changes nothing. Not safe for concurrent use: one loop owns
// it.
type Collector struct {
	M      *Manager
	Claims ClaimReader
	// Grace is how long a claim must stay unallocated to this node, from
	// the first read that says so to the second, and how old a record must
	// be before it is read at all (a Prepare races the API's caches).
	Grace time.Duration
	Now   func() time.Time

	firstMiss map[string]time.Time // claim UID → the first read that proved nothing of it for this node
}

// CollectReport counts one pass.
type CollectReport struct {
	Checked, Missing, Collected, ReadErrors int
}

// Pass reads every record's claim once and unprepares those proven lost.
func (c *Collector) Pass(ctx context.Context) (CollectReport, error) {
	if c.firstMiss == nil {
		c.firstMiss = map[string]time.Time{}
	}
	now := c.Now()
	var rep CollectReport
	seen := map[string]bool{}
	for _, rec := range c.M.Records() {
		seen[rec.UID] = true
		if now.Sub(rec.Created) < c.Grace {
			continue
		}
		rep.Checked++
		claim, err := c.Claims.GetClaim(ctx, rec.Namespace, rec.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			rep.ReadErrors++
			c.M.log.Warn("read a prepared claim from the API server; nothing is concluded", "claim", rec.Key(), "err", err)
			continue
		}
		if err == nil && c.allocatedHere(claim, rec) {
			delete(c.firstMiss, rec.UID)
			continue
		}
		rep.Missing++
		first, ok := c.firstMiss[rec.UID]
		if !ok {
			c.firstMiss[rec.UID] = now
			continue
		}
		if now.Sub(first) < c.Grace {
			continue
		}
		c.M.log.Warn("the API server no longer allocates a prepared claim to this node, twice past the grace; unpreparing it (the kubelet lost its claim state)",
			"claim", rec.Key(), "uid", rec.UID, "first_seen_missing", first, "vni", rec.VNI)
		if err := c.M.Unprepare(ctx, rec.UID); err != nil {
			c.M.cfg.Events.Record(event.Node(c.M.cfg.Node), event.ClaimCollectFailed,
				fmt.Sprintf("ResourceClaim %s (UID %s, VNI %d) is no longer allocated to this node, and unpreparing it failed: %v", rec.Key(), rec.UID, rec.VNI, err))
			return rep, fmt.Errorf("collect lost claim %s: %w", rec.Key(), err)
		}
		delete(c.firstMiss, rec.UID)
		rep.Collected++
	}
	for uid := range c.firstMiss {
		if !seen[uid] {
			delete(c.firstMiss, uid) // unprepared meanwhile
		}
	}
	return rep, nil
}

// allocatedHere reports whether claim is rec's claim and its allocation
// still names a device of this driver on this node.
func (c *Collector) allocatedHere(claim *resourceapi.ResourceClaim, rec Record) bool {
	if string(claim.UID) != rec.UID || claim.Status.Allocation == nil {
		return false
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == c.M.cfg.Driver && r.Pool == c.M.cfg.Node {
			return true
		}
	}
	return false
}

// Run makes a pass every interval until ctx ends. A pass's error (an
// Unprepare that could not finish) is logged and retried at the next.
func (c *Collector) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rep, err := c.Pass(ctx)
		if err != nil {
			c.M.log.Warn("collect lost claims; retrying at the next pass", "err", err)
		}
		if rep.Collected > 0 {
			c.M.log.Info("collected claims the kubelet lost", "collected", rep.Collected, "checked", rep.Checked)
		}
	}
}

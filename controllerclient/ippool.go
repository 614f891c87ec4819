package controllerclient

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"google.golang.org/grpc"
)

// IPPool is one of the controller's IP pools: Prefix cut into /SliceBits
// slices.
type IPPool struct {
	Name      string
	Prefix    netip.Prefix
	SliceBits int
}

// IPSlice is a slice of an IP pool that the controller leases to this
// node, until Expires unless a heartbeat renews it.
type IPSlice struct {
	Pool    string
	Index   int
	Prefix  netip.Prefix
	Expires time.Time
}

// SliceReport is what the node says about one IP slice it holds.
type SliceReport struct {
	Pool  string
	Index int
	// Allocated is how many addresses of the slice are in use.
	Allocated int
	// Open says the node hands out addresses of the slice without further
	// report, so Allocated may grow before the next heartbeat. The
	// controller never reclaims an open slice while the node is only
	// silent (only once its Node object is deleted, and then only with
	// nothing allocated). A slice is leased open; report it closed only
	// once nothing is handed out from it any more (to give it back), and
	// report it open again, in a heartbeat that has been answered, before
	// handing out from it anew.
	Open bool
}

// SliceHolder is what keeps IP slices on the node (the agent's IPAM). The
// heartbeat asks it for its reports and hands it the answer.
//
// Heartbeats run one at a time, and each calls SliceReports once and then,
// when it is answered, SlicesHeld at most once: an answer is skipped when
// an IP slice acquire or release of the Client ended after SliceReports,
// as it may predate it. The answer reflects every acquire and release that
// ended before SliceReports; one still in flight then, or ending while
// SlicesHeld runs, may or may not be reflected: a slice being given back
// may still be listed as held, and must not be taken up again. Its methods
// must not call the Heartbeat.
type SliceHolder interface {
	// SliceReports returns the reports of every IP slice the holder keeps.
	// Reports of the pod VNI pool, or with an index outside 0-2^20 or a
	// count outside 0-2^30, are left out of the heartbeat (logged).
	SliceReports() []SliceReport
	// SlicesHeld gives the answer of a heartbeat that carried those
	// reports: held is every IP-pool slice the controller says the node
	// holds (all IP pools), lost the reported slices it does not hold, from
	// which the node must stop handing out addresses.
	SlicesHeld(held []IPSlice, lost []SliceReport)
}

// SetSliceHolder makes every heartbeat include h's reports and hand h the
// answer; call it before Run.
func (c *Client) SetSliceHolder(h SliceHolder) {
	c.ip.Lock()
	defer c.ip.Unlock()
	c.holder = h
}

func (c *Client) holderAndGen() (SliceHolder, uint64) {
	c.ip.Lock()
	defer c.ip.Unlock()
	return c.holder, c.gen
}

// holderReports returns h's reports that a heartbeat can carry.
func (c *Client) holderReports(h SliceHolder) []SliceReport {
	if h == nil {
		return nil
	}
	var out []SliceReport
	for _, r := range h.SliceReports() {
		// The controller refuses a whole heartbeat with an index above
		// 2^20 or a count above 2^30 in it.
		if r.Pool == slices.PodVNIPool || r.Index < 0 || r.Allocated < 0 || r.Index > 1<<20 || r.Allocated > 1<<30 {
			c.opts.Logger.Warn("slice report left out of the heartbeat", "pool", r.Pool, "index", r.Index, "allocated", r.Allocated)
			continue
		}
		out = append(out, r)
	}
	return out
}

// deliver hands h the answer to a heartbeat that carried reports, asked
// for at gen, unless an IP slice acquire or release ended since: the
// answer may then predate it, and the next heartbeat's will not. It calls
// h without the lock, so that h may call the Client.
func (c *Client) deliver(h SliceHolder, gen uint64, reports []SliceReport, resp *apiv1.RenewSlicesResponse) {
	var held []IPSlice
	for _, s := range resp.GetHeld() {
		if ip, ok := ipSlice(s); ok {
			held = append(held, ip)
		}
	}
	reported := make(map[sliceKey]SliceReport, len(reports))
	for _, r := range reports {
		reported[sliceKey{r.Pool, r.Index}] = r
	}
	var lost []SliceReport
	for _, l := range resp.GetLost() {
		if r, ok := reported[sliceKey{l.GetPool(), int(l.GetIndex())}]; ok {
			lost = append(lost, r)
		}
	}
	c.ip.Lock()
	stale := c.gen != gen
	c.ip.Unlock()
	if !stale {
		h.SlicesHeld(held, lost)
	}
}

type sliceKey struct {
	pool  string
	index int
}

// ended records that an IP slice acquire or release has ended.
func (c *Client) ended() {
	c.ip.Lock()
	defer c.ip.Unlock()
	c.gen++
}

// ipSlice converts a slice of an IP pool; ok is false for any other.
func ipSlice(s *apiv1.Slice) (IPSlice, bool) {
	p, err := netip.ParsePrefix(s.GetPrefix())
	if err != nil || s.GetPool() == "" {
		return IPSlice{}, false
	}
	return IPSlice{Pool: s.GetPool(), Index: int(s.GetIndex()), Prefix: p, Expires: time.UnixMilli(s.GetExpiresUnixMs())}, true
}

// IPPools returns the controller's IP pools (its VNI pools left out).
// Errors match the package's sentinels, or say which pool's spec does not
// parse.
func (c *Client) IPPools(ctx context.Context) ([]IPPool, error) {
	var resp *apiv1.ListSlicesResponse
	err := c.call(ctx, "ListSlices", func(ctx context.Context, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.api.ListSlices(ctx, &apiv1.ListSlicesRequest{Node: c.opts.Node}, opts...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ip pools: %w", err)
	}
	var out []IPPool
	for _, p := range resp.GetPools() {
		spec, err := slices.ParsePool(p.GetSpec())
		if err != nil {
			return nil, fmt.Errorf("ip pools: pool %q: %w", p.GetName(), err)
		}
		if spec.Name != p.GetName() {
			return nil, fmt.Errorf("ip pools: pool %q has the spec of pool %q", p.GetName(), spec.Name)
		}
		if spec.Prefix.IsValid() {
			out = append(out, IPPool{Name: spec.Name, Prefix: spec.Prefix, SliceBits: spec.SliceSize})
		}
	}
	return out, nil
}

// AcquireIPSlices makes the node hold at least count (1-64) slices of the
// IP pool and returns all it holds there. A full pool is an error that
// names it and matches ErrExhausted; other errors match the package's
// sentinels.
func (c *Client) AcquireIPSlices(ctx context.Context, pool string, count int) ([]IPSlice, error) {
	if count < 1 || count > slices.MaxPerNode {
		return nil, fmt.Errorf("acquire %d slices of ip pool %s: %w: count outside 1-%d", count, pool, ErrInvalidArgument, slices.MaxPerNode)
	}
	out, err := c.acquireIP(ctx, &apiv1.AcquireSlicesRequest{Node: c.opts.Node, Pool: pool, Count: uint32(count)})
	if err != nil {
		return nil, fmt.Errorf("acquire %d slices of ip pool %s: %w", count, pool, err)
	}
	return out, nil
}

// AcquireIPSliceAt makes the node hold slice index of the IP pool, as for
// a pod that asks for a fixed address outside the node's slices, and
// returns all it holds there. When another node holds the slice the error
// is a *SliceTakenError (matching ErrSliceTaken) naming that node; an
// index outside the pool matches ErrInvalidArgument, a node that holds 64
// slices of the pool ErrExhausted.
func (c *Client) AcquireIPSliceAt(ctx context.Context, pool string, index int) ([]IPSlice, error) {
	if index < 0 || index > 1<<20 {
		return nil, fmt.Errorf("acquire slice %d of ip pool %s: %w: index outside 0-%d", index, pool, ErrInvalidArgument, 1<<20)
	}
	i := uint32(index)
	out, err := c.acquireIP(ctx, &apiv1.AcquireSlicesRequest{Node: c.opts.Node, Pool: pool, Index: &i})
	if err != nil {
		return nil, fmt.Errorf("acquire slice %d of ip pool %s: %w", index, pool, err)
	}
	return out, nil
}

func (c *Client) acquireIP(ctx context.Context, req *apiv1.AcquireSlicesRequest) ([]IPSlice, error) {
	var resp *apiv1.NodeSlices
	err := c.call(ctx, "AcquireSlices", func(ctx context.Context, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.api.AcquireSlices(ctx, req, opts...)
		return err
	})
	c.ended()
	if err != nil {
		return nil, err
	}
	out := make([]IPSlice, 0, len(resp.GetSlices()))
	for _, s := range resp.GetSlices() {
		ip, ok := ipSlice(s)
		if !ok || ip.Pool != req.GetPool() {
			return nil, fmt.Errorf("%w: not an ip pool: the controller answered slice %d as %q", ErrInvalidArgument, s.GetIndex(), s.GetPrefix())
		}
		out = append(out, ip)
	}
	return out, nil
}

// ReleaseIPSlice gives slice index of the IP pool back. It returns nil
// when the controller no longer leases the slice to the node (released,
// or not held), an error matching ErrReleaseRefused when it certainly
// still does (it refused before acting), and any other error when that is
// unknown: the caller keeps the slice's addresses out of use and retries.
func (c *Client) ReleaseIPSlice(ctx context.Context, pool string, index int) error {
	if index < 0 || index > 1<<20 {
		return fmt.Errorf("release slice %d of ip pool %s: %w: %w: index outside 0-%d", index, pool, ErrReleaseRefused, ErrInvalidArgument, 1<<20)
	}
	attempts := 0
	err := c.call(ctx, "ReleaseSlice", func(ctx context.Context, opts ...grpc.CallOption) error {
		attempts++
		_, err := c.api.ReleaseSlice(ctx, &apiv1.ReleaseSliceRequest{Node: c.opts.Node, Pool: pool, Index: uint32(index)}, opts...)
		return err
	})
	c.ended()
	switch releaseOutcome(err, attempts) {
	case released:
		return nil
	case refused:
		return fmt.Errorf("release slice %d of ip pool %s: %w: %w", index, pool, ErrReleaseRefused, err)
	}
	return fmt.Errorf("release slice %d of ip pool %s: outcome unknown: %w", index, pool, err)
}

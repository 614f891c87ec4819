package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// ipSlicer is the controller client as the allocator's ipam.Slicer: the
// same calls, with the client's types and errors turned into the
// allocator's.
type ipSlicer struct{ c *controllerclient.Client }

func (s ipSlicer) Pools(ctx context.Context) ([]ipam.Pool, error) {
	pools, err := s.c.IPPools(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ipam.Pool, len(pools))
	for i, p := range pools {
		out[i] = ipam.Pool{Name: p.Name, Prefix: p.Prefix, SliceBits: p.SliceBits}
	}
	return out, nil
}

func (s ipSlicer) Acquire(ctx context.Context, pool string, count int) ([]ipam.Slice, error) {
	got, err := s.c.AcquireIPSlices(ctx, pool, count)
	return ipamSlices(got), ipamError(err)
}

func (s ipSlicer) AcquireAt(ctx context.Context, pool string, index int) ([]ipam.Slice, error) {
	got, err := s.c.AcquireIPSliceAt(ctx, pool, index)
	return ipamSlices(got), ipamError(err)
}

func (s ipSlicer) Release(ctx context.Context, pool string, index int) error {
	return ipamError(s.c.ReleaseIPSlice(ctx, pool, index))
}

func ipamSlices(in []controllerclient.IPSlice) []ipam.Slice {
	if in == nil {
		return nil
	}
	out := make([]ipam.Slice, len(in))
	for i, s := range in {
		out[i] = ipam.Slice{Pool: s.Pool, Index: s.Index, Prefix: s.Prefix}
	}
	return out
}

// ipamError keeps err's text and chain and adds the allocator's sentinel
// where the client's error means one: a full pool, a slice another node
// holds, a release the controller certainly refused.
func ipamError(err error) error {
	if err == nil {
		return nil
	}
	if taken, ok := errors.AsType[*controllerclient.SliceTakenError](err); ok {
		return fmt.Errorf("%w: %w", &ipam.SliceTakenError{Pool: taken.Pool, Index: taken.Index, Node: taken.Node}, err)
	}
	switch {
	case errors.Is(err, controllerclient.ErrExhausted):
		return fmt.Errorf("%w: %w", ipam.ErrPoolFull, err)
	case errors.Is(err, controllerclient.ErrReleaseRefused):
		return fmt.Errorf("%w: %w", ipam.ErrReleaseRefused, err)
	}
	return err
}

// sliceHolder is the allocator as the heartbeat's
// controllerclient.SliceHolder: its reports go out with every heartbeat,
// and the slices the controller no longer leases to the node come back.
type sliceHolder struct {
	a *ipam.Allocator
	// events tell the node of a lost slice with addresses in use.
	events eventRecorder
	node   string
}

func (h sliceHolder) SliceReports() []controllerclient.SliceReport {
	reps := h.a.Reports()
	out := make([]controllerclient.SliceReport, len(reps))
	for i, r := range reps {
		out[i] = controllerclient.SliceReport{Pool: r.Pool, Index: r.Index, Allocated: r.Allocated, Open: r.Open}
	}
	return out
}

// SlicesHeld hands on the lost slices only: a held slice the allocator
// does not know is one it gave back (or is giving back), never one to
// take up again from a heartbeat's answer.
func (h sliceHolder) SlicesHeld(_ []controllerclient.IPSlice, lost []controllerclient.SliceReport) {
	if len(lost) == 0 {
		return
	}
	out := make([]ipam.Report, len(lost))
	for i, r := range lost {
		out[i] = ipam.Report{Pool: r.Pool, Index: r.Index, Allocated: r.Allocated, Open: r.Open}
	}
	// Which of them hold addresses is the allocator's to say (the
	// heartbeat's report may be older): asked before Lost forgets the
	// empty ones.
	inUse := map[sliceID]int{}
	for _, r := range h.a.Reports() {
		inUse[sliceID{r.Pool, r.Index}] = r.Allocated
	}
	h.a.Lost(out)
	if h.events == nil {
		return
	}
	for _, r := range lost {
		if n := inUse[sliceID{r.Pool, r.Index}]; n > 0 {
			h.events.Record(event.Node(h.node), event.IPSliceLost,
				fmt.Sprintf("The controller no longer leases slice %d of IP pool %s to this node; %d addresses of it are in use here", r.Index, r.Pool, n))
		}
	}
}

// sliceID names one IP slice.
type sliceID struct {
	pool  string
	index int
}

package devplugin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
)

// countingLister counts the agent's List calls and the kubelet's refusals.
type countingLister struct {
	podwatch.Lister
	calls, refused atomic.Int64
}

func (c *countingLister) List(ctx context.Context, in *podresourcesv1.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	c.calls.Add(1)
	resp, err := c.Lister.List(ctx, in, opts...)
	if status.Code(err) == codes.ResourceExhausted {
		c.refused.Add(1)
	}
	return resp, err
}

// The kubelet limits PodResources to 100 requests a second, burst 10, for
// every client of the node together, and refuses the rest with
// ResourceExhausted. Under pod churn, with another client using most of
// that budget, no PreStart fails, and the agent lists about once per pod
// or less. (The old agent listed on every PreStart, poll and checkpoint
// event, and returned a refusal to the kubelet: on a real node 185 of
// 200 PreStarts failed.)
func TestPreStartUnderChurnWithinTheKubeletRateLimit(t *testing.T) {
	const workers, cycles = 8, 25
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	k := newFakeKubelet(t)
	client := k.serve(t, rate.NewLimiter(100, 10))
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()

	// Another consumer (a GPU or topology exporter) lists 90 times a
	// second through the same limit.
	var otherOK, otherRefused atomic.Int64
	bg.Go(func() {
		tick := time.NewTicker(time.Second / 90)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
			switch {
			case err == nil:
				otherOK.Add(1)
			case status.Code(err) == codes.ResourceExhausted:
				otherRefused.Add(1)
			}
		}
	})

	netns := fakeNetns{}
	for w := range workers {
		for c := range cycles {
			netns[fmt.Sprintf("uid-%d-%d", w, c)] = uint32(4026540000 + w*cycles + c)
		}
	}
	r := newRig(t, t.TempDir(), nil, netns)
	for w := range workers {
		r.b.devNIC[fmt.Sprintf("share-%d", w)] = []string{"cxi0", "cxi1"}[w%2]
	}
	lister := &countingLister{Lister: client}
	pw := podwatch.New(podwatch.Config{Lister: lister, Resources: []string{res}, PluginDir: k.dir, Nudge: k.nudge,
		Logger: testLoggerDiscard()})
	r.b.pods = pw
	bg.Go(func() { _ = pw.Run(ctx) })
	bg.Go(func() {
		retry := time.NewTicker(time.Second)
		defer retry.Stop()
		r.b.RunCleanup(ctx, pw.Changes(), retry.C)
	})

	start := time.Now()
	var failed atomic.Int64
	var churn sync.WaitGroup
	for w := range workers {
		churn.Go(func() {
			for c := range cycles {
				p := kubeletPod{"churn", fmt.Sprintf("p-%d-%d", w, c), fmt.Sprintf("uid-%d-%d", w, c), "main", []string{fmt.Sprintf("share-%d", w)}}
				k.admit(p)
				// The kubelet's own deadline for PreStartContainer.
				pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
				if err := r.b.PreStart(pctx, res, p.ids); err != nil {
					failed.Add(1)
					t.Errorf("PreStart of %s: %v", p.name, err)
				}
				pcancel()
				k.remove(p.uid)
			}
		})
	}
	churn.Wait()
	elapsed := time.Since(start)
	lists := lister.calls.Load()

	// Every pod is gone: the agent cleans them all up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := len(r.store.IDs(checkpoint.KindPod))
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods not cleaned up", left)
		}
		select {
		case <-time.After(20 * time.Millisecond): // a condition poll, as harness.Eventually
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	pods := workers * cycles
	t.Logf("%d pods in %v: %d PreStart failures; agent List calls %d (%.2f per pod, %d refused by the limit); "+
		"%d more until all were cleaned up; the other client: %d listed, %d refused",
		pods, elapsed.Round(time.Millisecond), failed.Load(), lists, float64(lists)/float64(pods), lister.refused.Load(),
		lister.calls.Load()-lists, otherOK.Load(), otherRefused.Load())
	if perPod := float64(lists) / float64(pods); perPod > 1.5 {
		t.Errorf("%.2f List calls per pod, want at most 1.5", perPod)
	}
}

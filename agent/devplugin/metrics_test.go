package devplugin

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// queuedLister answers its next calls with the queued errors, one each,
// and then as its kubelet does.
type queuedLister struct {
	podwatch.Lister

	mu   sync.Mutex
	errs []error
}

func (l *queuedLister) List(ctx context.Context, in *podresourcesv1.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.mu.Lock()
	var err error
	if len(l.errs) > 0 {
		err, l.errs = l.errs[0], l.errs[1:]
	}
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.Lister.List(ctx, in, opts...)
}

func (l *queuedLister) queue(errs ...error) {
	l.mu.Lock()
	l.errs = append(l.errs, errs...)
	l.mu.Unlock()
}

// Every List the agent sends the kubelet's PodResources is counted by
// result, a refused one's retries included, and the successful ones are
// timed; every nudge of the kubelet is counted by resource.
func TestPodResourcesMetrics(t *testing.T) {
	k := newFakeKubelet(t)
	k.admit(kubeletPod{"ns", "a", "uid-a", "main", []string{"share-0"}})
	m := newTestMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Nudges, m.PodLists, m.ListLatency)
	lister := &queuedLister{Lister: k}
	retry := backoff.Policy{Initial: time.Millisecond, Attempts: 5, Wait: func(ctx context.Context, _ time.Duration) error {
		return ctx.Err()
	}}
	w := podwatch.New(podwatch.Config{Lister: lister, Resources: []string{res}, PluginDir: k.dir, MinListInterval: 1,
		Retry: retry, Nudge: countNudges(m.Nudges, k.nudge), OnList: m.observeList, Logger: testLogger(t)})

	type counts struct {
		ok, limited, failed, timed, nudges float64
	}
	step := func(name string, wantErr bool, want counts) {
		t.Helper()
		if _, err := w.Refresh(t.Context()); (err != nil) != wantErr {
			t.Fatalf("%s: Refresh = %v", name, err)
		}
		got := counts{
			ok:      testutil.ToFloat64(m.PodLists.WithLabelValues("ok")),
			limited: testutil.ToFloat64(m.PodLists.WithLabelValues("rate_limited")),
			failed:  testutil.ToFloat64(m.PodLists.WithLabelValues("error")),
			timed:   float64(histogramCount(t, m.ListLatency)),
			nudges:  testutil.ToFloat64(m.Nudges.WithLabelValues(res)),
		}
		if got != want {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
	}

	lister.queue(status.Error(codes.ResourceExhausted, "rejected by rate limit"),
		status.Error(codes.ResourceExhausted, "rejected by rate limit"))
	step("refused twice, then answered", false, counts{ok: 1, limited: 2, timed: 1})
	lister.queue(status.Error(codes.Unavailable, "kubelet down"))
	step("unavailable", true, counts{ok: 1, limited: 2, failed: 1, timed: 1})

	// The pod ends: the next List frees its device in the kubelet's memory
	// but not in its checkpoint, which the watcher nudges it to rewrite.
	k.remove("uid-a")
	step("checkpoint lags", false, counts{ok: 2, limited: 2, failed: 1, timed: 2, nudges: 1})
	step("checkpoint rewritten", false, counts{ok: 3, limited: 2, failed: 1, timed: 3, nudges: 1})

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

package podwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// flight is one PodResources List and the callers that share it.
type flight struct {
	// seq is the watcher's clock when it began. The caller that runs it
	// sets it before it lists; the others read it once done is closed.
	seq  uint64
	done chan struct{}
	// Set before done is closed.
	snap *Snapshot
	err  error
	// abandoned: the caller that ran it gave up (its context ended), which
	// tells the others nothing; they list again.
	abandoned bool
}

// flights coalesces the watcher's Lists: one runs at a time.
type flights struct {
	mu      sync.Mutex // guards running
	running *flight
}

// join returns the running flight, or, when none runs, a new one that the
// caller must run and then land: lead tells which.
func (fs *flights) join() (f *flight, lead bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.running != nil {
		return fs.running, false
	}
	fs.running = &flight{done: make(chan struct{})}
	return fs.running, true
}

// land ends the running flight f with its result and wakes those that
// wait for it; the next join starts another.
func (fs *flights) land(f *flight, snap *Snapshot, err error, abandoned bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.snap, f.err, f.abandoned = snap, err, abandoned
	fs.running = nil
	close(f.done)
}

// list returns the snapshot of a List that began at clock min or later.
// One List runs at a time: a caller that finds one running that began
// late enough shares its result; otherwise it waits for it to end and
// then starts the next List, or shares it with whoever started it first.
// The caller that starts a List runs it on its own context.
func (w *Watcher) list(ctx context.Context, min uint64) (*Snapshot, error) {
	for {
		f, lead := w.flights.join()
		if lead {
			w.fly(ctx, f)
			return f.snap, f.err
		}
		if w.onWait != nil {
			w.onWait()
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("list pod resources: %w", ctx.Err())
		}
		if f.seq >= min && !f.abandoned {
			return f.snap, f.err
		}
	}
}

// fly runs the flight f that this caller leads. The checkpoint read first
// marks every allocation written before this List as seen before it. The
// seq is taken after that read, outside the flights' lock, and before the
// List is sent: a caller that joined f while its seq was not yet set, and
// whose clock is below it, asked before the List began, so f serves it.
func (w *Watcher) fly(ctx context.Context, f *flight) {
	w.readCheckpoint()
	f.seq = w.clock.Add(1)
	snap, err := w.listOnce(ctx, f.seq)
	w.flights.land(f, snap, err, err != nil && ctx.Err() != nil)
}

// listOnce lists, reads the checkpoint for the pods' UIDs, keeps the
// snapshot, and nudges the kubelet where its checkpoint lags the List.
func (w *Watcher) listOnce(ctx context.Context, seq uint64) (*Snapshot, error) {
	resp, err := w.call(ctx)
	if err != nil {
		return nil, err
	}
	ck := w.readCheckpoint()
	snap := buildSnapshot(resp, w.cfg.Resources, ck)
	snap.seq = seq
	if w.snapshots.keep(snap) {
		w.announce()
	}
	w.nudgeLagging(snap, ck)
	return snap, nil
}

// call sends one List, spaced from the last by MinListInterval, and
// retries it with backoff while the kubelet refuses it for its rate limit.
// Other errors are returned at once.
func (w *Watcher) call(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	var resp *podresourcesv1.ListPodResourcesResponse
	err := w.cfg.Retry.Do(ctx, func(ctx context.Context) error {
		if err := w.pacer.wait(ctx); err != nil {
			return err
		}
		lctx, cancel := context.WithTimeout(ctx, w.cfg.ListTimeout)
		defer cancel()
		start := w.cfg.Now()
		// Wait, within ListTimeout, for a connection the kubelet's restart
		// broke, rather than fail at once while it is being re-made.
		r, err := w.cfg.Lister.List(lctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
		result := listResult(err)
		w.cfg.OnList(result, w.cfg.Now().Sub(start))
		switch result {
		case ListOK:
			resp = r
			return nil
		case ListRateLimited:
			return err
		default:
			return backoff.Permanent(err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	return resp, nil
}

func listResult(err error) ListResult {
	switch {
	case err == nil:
		return ListOK
	case status.Code(err) == codes.ResourceExhausted:
		return ListRateLimited
	default:
		return ListError
	}
}

// pacer spaces the Lists this watcher sends.
type pacer struct {
	interval time.Duration // MinListInterval

	// mu guards last, and is held while a caller waits its turn, so that
	// the turns of concurrent callers are taken one at a time.
	mu   sync.Mutex
	last time.Time // when the last List was let go
}

// wait waits until interval has passed since the last List was let go.
func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := backoff.Sleep(ctx, time.Until(p.last.Add(p.interval))); err != nil {
		return err
	}
	p.last = time.Now()
	return nil
}

// nudgeLagging nudges the kubelet for every resource whose checkpoint
// names a device, read before this List began, that the List no longer
// shows held: the kubelet freed it in memory (every List does that for
// pods no longer active) and rewrites the file only when it next writes.
func (w *Watcher) nudgeLagging(snap *Snapshot, ck *Checkpoint) {
	if w.cfg.Nudge == nil || !ck.known {
		return
	}
	held := snap.held()
	lagging := map[string]bool{}
	for key, a := range ck.devices {
		if a.seen < snap.seq && !held[key] {
			resource, _, _ := strings.Cut(key, "\x00")
			lagging[resource] = true
		}
	}
	for _, r := range w.cfg.Resources {
		w.nudges.check(r, lagging[r])
	}
}

func buildSnapshot(resp *podresourcesv1.ListPodResourcesResponse, resources []string, ck *Checkpoint) *Snapshot {
	snap := &Snapshot{Pods: map[string]*Pod{}}
	for _, pr := range resp.GetPodResources() {
		pod := &Pod{Namespace: pr.GetNamespace(), Name: pr.GetName(), Containers: map[string]map[string][]string{}}
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if !slices.Contains(resources, d.GetResourceName()) || len(d.GetDeviceIds()) == 0 {
					continue
				}
				byRes := pod.Containers[c.GetName()]
				if byRes == nil {
					byRes = map[string][]string{}
					pod.Containers[c.GetName()] = byRes
				}
				byRes[d.GetResourceName()] = append(byRes[d.GetResourceName()], d.GetDeviceIds()...)
				for _, id := range d.GetDeviceIds() {
					if a, ok := ck.devices[deviceKey(d.GetResourceName(), id)]; ok {
						pod.UID = a.PodUID
					}
				}
			}
		}
		if len(pod.Containers) == 0 {
			continue // holds none of our devices, or terminated (older kubelets)
		}
		for _, byRes := range pod.Containers {
			for r := range byRes {
				slices.Sort(byRes[r])
				byRes[r] = slices.Compact(byRes[r])
			}
		}
		snap.Pods[pod.Key()] = pod
	}
	return snap
}

func snapshotsEqual(a, b *Snapshot) bool {
	return maps.EqualFunc(a.Pods, b.Pods, func(x, y *Pod) bool {
		return x.UID == y.UID && maps.EqualFunc(x.Containers, y.Containers, func(p, q map[string][]string) bool {
			return maps.EqualFunc(p, q, slices.Equal)
		})
	})
}

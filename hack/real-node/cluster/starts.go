package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// StartWatch records, for the pods of one namespace, when this process
// first saw each pod's devices allocated and its containers started,
// through watches of the namespace's pods and ResourceClaims. "Allocated"
// is the pod's first ResourceClaim with status.allocation (DRA) or the
// pod's PodScheduled condition (device plugin: the kubelet allocates at
// admission, right after the binding). Close stops its goroutines.
type StartWatch struct {
	mu        sync.Mutex
	allocated map[string]time.Time // by pod name
	started   map[string]time.Time
	changed   chan struct{} // closed and replaced at every record
	err       error         // why a watch ended early

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// WatchStarts starts a StartWatch on namespace ns. Pods created after it
// returns are seen from their first event.
func (e *Env) WatchStarts(ctx context.Context, ns string) (*StartWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &StartWatch{allocated: map[string]time.Time{}, started: map[string]time.Time{}, changed: make(chan struct{}), cancel: cancel}
	pods := e.Node.Client.CoreV1().Pods(ns)
	claims := e.Node.Client.ResourceV1().ResourceClaims(ns)
	podList, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	claimList, err := claims.List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	podW, err := watchtools.NewRetryWatcherWithContext(ctx, podList.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) },
	})
	if err != nil {
		cancel()
		return nil, err
	}
	claimW, err := watchtools.NewRetryWatcherWithContext(ctx, claimList.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return claims.Watch(ctx, o) },
	})
	if err != nil {
		podW.Stop()
		cancel()
		return nil, err
	}
	w.wg.Add(2)
	go w.consume(ctx, podW, w.onPod)
	go w.consume(ctx, claimW, w.onClaim)
	return w, nil
}

func (w *StartWatch) consume(ctx context.Context, rw *watchtools.RetryWatcher, on func(runtime.Object, time.Time)) {
	defer w.wg.Done()
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rw.ResultChan():
			if !ok {
				w.fail(errors.New("watch ended"))
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				on(ev.Object, time.Now())
			case watch.Error:
				w.fail(fmt.Errorf("watch: %v", ev.Object))
				return
			}
		}
	}
}

func (w *StartWatch) onPod(obj runtime.Object, at time.Time) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && len(p.Spec.ResourceClaims) == 0 {
			w.record(w.allocated, p.Name, at)
		}
	}
	if Started(p) {
		w.record(w.started, p.Name, at)
	}
}

func (w *StartWatch) onClaim(obj runtime.Object, at time.Time) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok || c.Status.Allocation == nil {
		return
	}
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" {
			w.record(w.allocated, o.Name, at)
		}
	}
}

func (w *StartWatch) record(m map[string]time.Time, pod string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := m[pod]; ok {
		return
	}
	m[pod] = at
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *StartWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// Wait waits until pod was seen allocated and started, and returns both
// times.
func (w *StartWatch) Wait(ctx context.Context, pod string) (allocated, started time.Time, err error) {
	for {
		w.mu.Lock()
		a, aok := w.allocated[pod]
		s, sok := w.started[pod]
		ch, werr := w.changed, w.err
		w.mu.Unlock()
		switch {
		case aok && sok:
			return a, s, nil
		case werr != nil:
			return time.Time{}, time.Time{}, werr
		}
		select {
		case <-ctx.Done():
			return time.Time{}, time.Time{}, fmt.Errorf("pod %s: allocated seen %v, started seen %v: %w", pod, aok, sok, ctx.Err())
		case <-ch:
		}
	}
}

// Close stops the watches and waits for their goroutines.
func (w *StartWatch) Close() {
	w.cancel()
	w.wg.Wait()
}

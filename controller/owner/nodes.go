package owner

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodeWatcher implements controller.NodeDirectory with a Node informer.
// It is safe for concurrent use.
type NodeWatcher struct {
	client kubernetes.Interface
	now    func() time.Time

	mu      sync.Mutex
	synced  bool
	present map[string]bool
	gone    map[string]time.Time
	changed chan struct{}
}

// NewNodeWatcher returns a watcher; call Run to start it. now may be nil.
func NewNodeWatcher(client kubernetes.Interface, now func() time.Time) *NodeWatcher {
	if now == nil {
		now = time.Now
	}
	return &NodeWatcher{client: client, now: now, present: map[string]bool{}, gone: map[string]time.Time{}, changed: make(chan struct{}, 1)}
}

// Run follows Node objects until ctx ends. It returns an error if the
// informer cannot sync.
func (w *NodeWatcher) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(w.client, 0)
	inf := f.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.set(obj, true) },
		UpdateFunc: func(_, obj any) {
			w.set(obj, true)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			w.set(obj, false)
		},
	}); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("node informer: %w", context.Cause(ctx))
	}
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	w.notify()
	<-ctx.Done()
	return nil
}

func (w *NodeWatcher) set(obj any, present bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	w.mu.Lock()
	if present {
		w.present[n.Name] = true
		delete(w.gone, n.Name)
	} else {
		delete(w.present, n.Name)
		w.gone[n.Name] = w.now()
	}
	w.mu.Unlock()
	w.notify()
}

func (w *NodeWatcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed returns a channel that receives after the watcher's view changed.
func (w *NodeWatcher) Changed() <-chan struct{} { return w.changed }

// NodeGone implements controller.NodeDirectory: a node is gone since its
// deletion was seen, or since it was first asked about while missing
// after the informer synced. Before the sync nothing is gone.
func (w *NodeWatcher) NodeGone(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced || w.present[name] {
		return time.Time{}, false
	}
	since, ok := w.gone[name]
	if !ok {
		since = w.now()
		w.gone[name] = since
	}
	return since, true
}

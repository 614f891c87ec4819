package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// gone reports whether a recorded pod is gone: the kubelet no longer
// holds its devices (see podwatch.Watcher.Gone).
func (b *binder) gone(entry checkpoint.Pod) bool {
	return b.pods.Gone(holderOf(entry))
}

// holderOf is the pod a record names, with the devices it held.
func holderOf(entry checkpoint.Pod) podwatch.Holder {
	h := podwatch.Holder{Namespace: entry.Namespace, Name: entry.Name, UID: entry.UID, Devices: map[string][]string{}}
	for rec, ids := range entry.DeviceIDs {
		_, resource, _ := strings.Cut(rec, "@")
		h.Devices[resource] = append(h.Devices[resource], ids...)
	}
	return h
}

// RunCleanup cleans up pods as they go, until ctx ends: on every change of
// the pod watch and every retry interval (for services still busy). It
// waits for the cleanups it started before returning.
func (b *binder) RunCleanup(ctx context.Context, changes <-chan struct{}, retry <-chan time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-retry:
		}
		b.sweep(ctx, &wg)
	}
}

// sweep starts a cleanup for every recorded pod that is gone, unless one
// is already running for it.
func (b *binder) sweep(ctx context.Context, wg *sync.WaitGroup) {
	for _, entry := range b.store.Pods() {
		if !b.gone(entry) {
			continue
		}
		key := entry.Key()
		if _, running := b.cleaning.LoadOrStore(key, struct{}{}); running {
			continue
		}
		wg.Go(func() {
			defer b.cleaning.Delete(key)
			unlock := b.podLocks.Lock(key)
			defer unlock()
			// Re-check under the pod lock: a bind may have just recorded a
			// new pod of the same name.
			if entry, ok := b.store.Get(key); !ok || !b.gone(entry) {
				return
			}
			b.cleanupLocked(ctx, key)
		})
	}
}

// cleanupLocked destroys a gone pod's services, removes what was published
// for its containers and releases its VNI. The caller holds the pod's
// lock. It reports whether the pod's record is gone; a service still busy
// after its retries keeps the record, to be tried again.
func (b *binder) cleanupLocked(ctx context.Context, key string) bool {
	entry, ok := b.store.Get(key)
	if !ok {
		return true
	}
	if entry.Exited == nil {
		var err error
		if entry, err = b.update(key, func(p *checkpoint.Pod) { t := b.now().UTC(); p.Exited = &t }); err != nil {
			b.recordFailed(key, fmt.Errorf("mark the pod exited: %w", err))
			return false
		}
		if err := b.save(); err != nil {
			b.recordFailed(key, err)
		}
	}
	for _, s := range entry.Services {
		if err := b.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			if errors.Is(err, cxi.ErrBusy) {
				b.logger.Warn("service still in use after retries; will retry", "pod", key, "nic", s.NIC, "id", s.ID, "err", err)
			} else {
				b.logger.Error("destroy service; will retry", "pod", key, "nic", s.NIC, "id", s.ID, "err", err)
			}
			continue
		}
		b.dropService(key, s)
	}
	for _, ids := range entry.DeviceIDs {
		b.removeAllocation(key, cdispec.AllocationKey(ids))
	}
	if left, _ := b.store.Get(key); len(left.Services) > 0 {
		if err := b.save(); err != nil {
			b.recordFailed(key, err)
		}
		return false
	}
	if !b.dropHSN(key, b.ns.Get(key)) {
		if err := b.save(); err != nil {
			b.recordFailed(key, err)
		}
		return false
	}
	b.ns.Release(key) // no service names the namespace any more
	if !entry.Released {
		if !b.release(ctx, key, leaseOf(&entry)) {
			return false
		}
		if _, err := b.update(key, func(p *checkpoint.Pod) { p.Released = true }); err != nil {
			b.recordFailed(key, fmt.Errorf("mark the pod's lease released: %w", err))
		}
	}
	b.store.Delete(key)
	if err := b.save(); err != nil {
		b.recordFailed(key, err)
	}
	b.metrics.cleanupLatency.Observe(b.now().Sub(*entry.Exited).Seconds())
	b.logger.Info("cleaned up pod", "pod", key, "vni", entry.VNI, "services", len(entry.Services))
	return true
}

// recordFailed tells of a checkpoint write that failed while cleaning up
// pod key: logged, and an event on the node, whose record it is. The
// cleanup keeps what it could not record and retries.
func (b *binder) recordFailed(key string, err error) {
	b.logger.Error("record a pod's cleanup; will retry", "pod", key, "err", err)
	b.events.Record(event.Node(b.node), event.RecordFailed, fmt.Sprintf("Cleaning up pod %s: %v", key, err))
}

// removeAllocation removes an allocation's per-container directory and
// CDI spec for the gone pod podKey, unless another recorded pod holds the
// same devices: the kubelet hands a freed device to the next pod at once,
// and these files are named by the devices, so they may be that pod's by
// now. A PreStart records the devices before it publishes, under the same
// allocation lock.
func (b *binder) removeAllocation(podKey, allocKey string) {
	inUse := func() bool {
		for _, p := range b.store.Pods() {
			for _, ids := range p.DeviceIDs {
				if p.Key() != podKey && cdispec.AllocationKey(ids) == allocKey {
					return true
				}
			}
		}
		return false
	}
	if err := b.files.remove(allocKey, inUse); err != nil {
		b.logger.Warn("remove the files of a gone pod's allocation", "pod", podKey, "err", err)
	}
}

// pendingDestroys are the gone pods whose services are not destroyed yet,
// dated from when their cleanup began (the record's Exited), for the
// drain watch.
func (b *binder) pendingDestroys() []pendingDestroy {
	var out []pendingDestroy
	for _, p := range b.store.Pods() {
		if p.Exited == nil || len(p.Services) == 0 {
			continue
		}
		d := pendingDestroy{owner: "pod " + p.Key(), pods: []event.Object{event.Pod(p.Namespace, p.Name, p.UID)}, since: *p.Exited}
		for _, s := range p.Services {
			d.services = append(d.services, fmt.Sprintf("%s:%d", s.NIC, s.ID))
		}
		out = append(out, d)
	}
	return out
}

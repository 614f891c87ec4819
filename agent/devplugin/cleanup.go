package devplugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// gone reports whether a recorded pod is gone: the kubelet no longer
// holds its devices (see podwatch.Watcher.Gone).
func (b *binder) gone(entry checkpoint.Holder) bool {
	return b.pods.Gone(holderOf(entry))
}

// holderOf is the pod a record names, with the devices it held.
func holderOf(entry checkpoint.Holder) podwatch.Holder {
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
	for _, entry := range b.eng.Holders(checkpoint.KindPod) {
		if !b.gone(entry) {
			continue
		}
		key := entry.ID()
		if _, running := b.cleaning.LoadOrStore(key, struct{}{}); running {
			continue
		}
		wg.Go(func() {
			defer b.cleaning.Delete(key)
			unlock := b.eng.Lock(key)
			defer unlock()
			// Re-check under the pod lock: a bind may have just recorded a
			// new pod of the same name.
			if entry, ok := b.eng.Get(key); !ok || !b.gone(entry) {
				return
			}
			b.cleanupLocked(ctx, key)
		})
	}
}

// cleanupLocked has the engine tear down a gone pod: its services
// destroyed, what was published for its containers and its hsn interface
// removed, its VNI released. The caller holds the pod's lock. It reports
// whether the pod's record is gone; a service still busy after its
// retries keeps the record, to be tried again.
func (b *binder) cleanupLocked(ctx context.Context, key string) bool {
	entry, ok := b.eng.Get(key)
	if !ok {
		return true
	}
	if entry.Exited == nil {
		var err error
		if entry, err = b.eng.Update(key, func(p *checkpoint.Holder) { t := b.now().UTC(); p.Exited = &t }); err != nil {
			b.logger.Error("mark a gone pod exited; will retry", "pod", key, "err", err)
			return false
		}
	}
	done, err := b.eng.Teardown(ctx, key, func(p checkpoint.Holder) error {
		for _, ids := range p.DeviceIDs {
			b.removeAllocation(key, cdispec.AllocationKey(ids))
		}
		if !b.eng.DropHSN(key) {
			return errors.New("its hsn interface or address is not released yet")
		}
		return nil
	})
	if !done {
		if errors.Is(err, cxi.ErrBusy) {
			b.logger.Warn("pod's services still in use after retries; will retry", "pod", key, "err", err)
		} else {
			b.logger.Error("clean up a gone pod; will retry", "pod", key, "err", err)
		}
		return false
	}
	b.logger.Info("cleaned up pod", "pod", key, "vni", entry.VNI, "services", len(entry.Services))
	return true
}

// removeAllocation removes an allocation's per-container directory and
// CDI spec for the gone pod podKey, unless another recorded pod holds the
// same devices: the kubelet hands a freed device to the next pod at once,
// and these files are named by the devices, so they may be that pod's by
// now. A PreStart records the devices before it publishes, under the same
// allocation lock.
func (b *binder) removeAllocation(podKey, allocKey string) {
	inUse := func() bool {
		for _, p := range b.eng.Holders(checkpoint.KindPod) {
			for _, ids := range p.DeviceIDs {
				if p.ID() != podKey && cdispec.AllocationKey(ids) == allocKey {
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

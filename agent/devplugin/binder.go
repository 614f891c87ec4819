package devplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// podFinder tells which pod holds which devices, and when a pod is gone;
// *podwatch.Watcher is one.
type podFinder interface {
	// Find returns the pod and container holding ids of resource.
	Find(ctx context.Context, resource string, ids []string) (*podwatch.Pod, string, error)
	// Gone reports whether the kubelet no longer holds a pod's devices.
	Gone(h podwatch.Holder) bool
	// Refresh lists the pods anew.
	Refresh(ctx context.Context) (*podwatch.Snapshot, error)
}

// nsHandle holds a network namespace open (engine.Handle); *netns.Handle
// is one.
type nsHandle = engine.Handle

// NetnsFinder opens a pod's network namespace from its UID.
type NetnsFinder interface {
	Open(ctx context.Context, podUID string) (engine.Handle, error)
}

// ErrNoMember is returned by PreStart when the pod's network namespace
// cannot be found and no fallback member is configured: the agent never
// makes a service with open membership.
var ErrNoMember = errors.New("no service member for the pod")

// policy is the part of the configuration only this front end reads; it
// is swapped whole when the configuration reloads (SetPolicy). The
// service defaults and the job options are the engine's and the agent's.
type policy struct {
	fallback *cxi.Member
	// hsn is, by resource, the hsn interface its pods get; absent: none.
	hsn map[string]engine.HSNPolicy
}

// nic is one NIC as the pod path uses it: the engine alone reaches its
// driver, by name.
type nic struct {
	name    string // "cxi0"
	index   int
	devPath string // host path of /dev/cxiN
	netdev  string // the NIC's hsn netdev, "hsn0"; empty if it has none
}

// binder is the device plugin's side of a pod's life: at
// PreStartContainer it has the engine bind the pod, when the kubelet lets
// the pod's devices go it has the engine tear it down, and at start it has
// the engine reconcile the pods the record names. It adds what only the
// device plugin has: the pod found from its devices, the per-container
// files, the hsn interface. Its methods are safe for concurrent use.
type binder struct {
	node     string
	resource string
	logger   *slog.Logger
	nics     map[string]*nic   // by NIC name
	devNIC   map[string]string // NIC resource device ID → NIC name
	// resolve maps each served resource's device IDs to the NICs they
	// bind: the NIC resource's shares, or a GPU unit's nearest NICs.
	resolve map[string]func(ids []string) ([]*nic, error)
	// eng is the engine every pod's lease, services, namespace hold and
	// record go through.
	eng   *engine.Engine
	pods  podFinder
	netns NetnsFinder
	// jobs is what a pod may ask for its services (the agent's, reloaded
	// with the configuration).
	jobs func() *jobpolicy.Policy
	// annotations reads a pod's annotations from the API server where the
	// runtime did not report them; nil without an API server.
	annotations AnnotationReader
	files       *allocFiles
	metrics     Metrics
	// events tells the pods and the node what only the log would know.
	events event.Recorder
	now    func() time.Time
	pol    atomic.Pointer[policy]
	// ready, where not nil, says whether containers can be checked at
	// their creation (the NRI connection): a bind is refused while not.
	ready func() error
	// openNetns opens a sandbox's namespace by its path (NRI's check).
	openNetns func(path string) (engine.Handle, error)

	// The engine's lock of a pod orders its steps: one bind or cleanup at
	// a time. An allocation's files have their own order (allocFiles),
	// always taken after the pod's.

	cleaning sync.Map // pod key → struct{}: cleanups in flight
}

// observePreStart counts a PreStart's latency by its result.
func (b *binder) observePreStart(start time.Time, err error) {
	if b.metrics.PreStart == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	b.metrics.PreStart.WithLabelValues(result).Observe(b.now().Sub(start).Seconds())
}

func (b *binder) policy() policy { return *b.pol.Load() }

func (b *binder) setPolicy(p policy) { b.pol.Store(&p) }

// nicsOf maps device IDs to their NICs, deduplicated, in NIC order.
func (b *binder) nicsOf(ids []string) ([]*nic, error) {
	var out []*nic
	for _, id := range ids {
		name, ok := b.devNIC[id]
		if !ok {
			return nil, fmt.Errorf("unknown device %q", id)
		}
		n := b.nics[name]
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(x, y *nic) int { return x.index - y.index })
	return out, nil
}

// PreStart binds the container holding ids: it finds the pod, and the
// engine leases its VNI, makes a service on each of its NICs and binds
// them to the pod's network namespace, recording it all; then the
// late-bound environment is published. It is idempotent: a restarted
// container finds its services.
func (b *binder) PreStart(ctx context.Context, resource string, ids []string) (err error) {
	start := b.now()
	defer func() { b.observePreStart(start, err) }()

	resolve := b.resolve[resource]
	if resolve == nil {
		return fmt.Errorf("resource %s is not served", resource)
	}
	nics, err := resolve(ids)
	if err != nil {
		return err
	}
	pod, container, err := b.pods.Find(ctx, resource, ids)
	if err != nil {
		return err
	}
	// From here the pod is known: a refusal is told on it, for whoever
	// reads `kubectl describe pod` (the kubelet's own event says only that
	// PreStartContainer failed).
	defer func() {
		if err != nil {
			reason := event.BindRefused
			if errors.Is(err, engine.ErrAddressRefused) {
				reason = event.AddressRefused
			}
			b.events.Record(event.Pod(pod.Namespace, pod.Name, pod.UID), reason,
				fmt.Sprintf("Container %s: %v", container, err))
		}
	}()
	if b.ready != nil {
		// Nothing would check the container at its creation.
		if err := b.ready(); err != nil {
			return err
		}
	}
	key := pod.Key()
	unlock := b.eng.Lock(key)
	defer unlock()

	if err := b.retireReplaced(ctx, pod); err != nil {
		return err
	}
	member, handle, err := b.member(ctx, pod)
	if err != nil {
		return err
	}
	_, recorded := b.eng.Get(key)
	fresh := !recorded
	if fresh {
		if err := b.admit(ctx, pod, handle); err != nil {
			if handle != nil {
				_ = handle.Close()
			}
			return err
		}
	}
	// The container's devices are recorded with the bind, in the save
	// that makes the pod's record durable.
	markDevices := func(p *checkpoint.Holder) {
		p.DeviceIDs[allocationRecord(container, resource)] = slices.Sorted(slices.Values(ids))
	}
	created, err := b.bind(ctx, key, nics, member, handle, markDevices)
	if err == nil {
		err = b.ensureHSN(ctx, key, resource, nics, handle)
	}
	var entry checkpoint.Holder
	if err == nil {
		entry, _ = b.eng.Get(key)
	}
	if err != nil {
		b.rollback(ctx, key, created, fresh)
		return err
	}
	// The bind saved the record with the container's devices, and the hsn
	// step saves what it changes; services given a fallback member were
	// recorded without a save. The record and the published values do not
	// depend on each other: write them at once, since both wait on the
	// disk.
	var saveErr, pubErr error
	var wg sync.WaitGroup
	if handle == nil {
		wg.Go(func() { saveErr = b.eng.Save() })
	}
	wg.Go(func() { pubErr = b.publish(ids, entry, nics) })
	wg.Wait()
	if saveErr != nil {
		b.rollback(ctx, key, created, fresh)
		return saveErr
	}
	if pubErr != nil {
		return pubErr
	}
	b.logger.Info("bound pod", "pod", key, "uid", pod.UID, "container", container,
		"vni", entry.VNI, "scope", entry.Scope, "netns", entry.Netns, "nics", nicNames(nics))
	return nil
}

// admit has the engine lease the VNI of a pod seen for the first time and
// record it, with the service options it asks for, before any service
// exists: durably where a fallback member is given at the services'
// creation, with the bind's save where its namespace h is bound.
func (b *binder) admit(ctx context.Context, pod *podwatch.Pod, h nsHandle) error {
	opts, err := b.optionsFor(ctx, pod, h)
	if err != nil {
		return err
	}
	rec := checkpoint.Holder{Kind: checkpoint.KindPod, UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		DeviceIDs: map[string][]string{}, Options: opts}
	ref := controllerclient.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	if h == nil {
		_, err = b.eng.Admit(ctx, rec, ref, shareKey(pod, h))
	} else {
		_, err = b.eng.AdmitToBind(ctx, rec, ref, shareKey(pod, h))
	}
	return err
}

// bind has the engine make the pod's services on nics and bind them to
// its namespace h, or give them the fallback member where h is nil, and
// mark the record with the front end's fields. It returns the services
// made in this call.
func (b *binder) bind(ctx context.Context, key string, nics []*nic, member cxi.Member, h nsHandle, mark func(*checkpoint.Holder)) ([]checkpoint.Service, error) {
	var fallback *cxi.Member
	if h == nil {
		fallback = &member
	} else {
		// A sandbox made again: the pod's hsn interface leaves the old
		// namespace, still held, before the engine lets it go.
		b.eng.LeaveOldNamespace(key, h)
	}
	created, err := b.eng.Ensure(ctx, key, nicNames(nics), fallback)
	if err != nil {
		if h != nil {
			_ = h.Close()
		}
		return created, err
	}
	if h == nil {
		_, err := b.eng.Update(key, mark)
		return created, err
	}
	// The handle is the engine's from here.
	_, err = b.eng.Bind(ctx, key, h, mark)
	return created, err
}

// podMeta is a namespace handle that knows its pod's labels and
// annotations (the runtime's, over CRI); *netns.Handle is one.
type podMeta interface {
	PodMeta() (labels, annotations map[string]string)
}

// shareKey names pod's job for the lease holds, from what the runtime
// reported with its sandbox; "" where nothing did (the namespace found
// through /proc, or a fallback member).
func shareKey(pod *podwatch.Pod, h nsHandle) string {
	m, ok := h.(podMeta)
	if !ok || h == nil {
		return ""
	}
	labels, annotations := m.PodMeta()
	return engine.ShareKey(pod.Namespace, labels, annotations)
}

// allocationRecord keys a container's devices of one resource in the
// checkpoint: "main@hpe.com/cxi".
func allocationRecord(container, resource string) string { return container + "@" + resource }

// retireReplaced cleans up a recorded pod of the same name but another
// UID: a StatefulSet pod recreated before its predecessor's exit was seen.
func (b *binder) retireReplaced(ctx context.Context, pod *podwatch.Pod) error {
	old, ok := b.eng.Get(pod.Key())
	if !ok || old.UID == "" || pod.UID == "" || old.UID == pod.UID {
		return nil
	}
	b.logger.Info("pod was replaced; cleaning up its predecessor", "pod", pod.Key(), "old_uid", old.UID, "uid", pod.UID)
	if done := b.cleanupLocked(ctx, pod.Key()); !done {
		return fmt.Errorf("pod %s replaced, but the services of its predecessor %s are still busy", pod.Key(), old.UID)
	}
	return nil
}

// member chooses the services' member: the pod's network namespace, held
// open by the returned handle, or the configured fallback UID/GID (and a
// nil handle) where the namespace cannot be found.
func (b *binder) member(ctx context.Context, pod *podwatch.Pod) (cxi.Member, nsHandle, error) {
	var nsErr error
	if pod.UID == "" {
		nsErr = errors.New("pod UID unknown (the kubelet checkpoint did not name it)")
	} else if h, err := b.netns.Open(ctx, pod.UID); err == nil {
		return cxi.Member{Type: cxi.MemberNetNS, ID: h.Inode()}, h, nil
	} else {
		nsErr = err
	}
	if fb := b.policy().fallback; fb != nil {
		b.logger.Warn("pod network namespace not found; using the configured fallback member",
			"pod", pod.Key(), "member", fb.String(), "err", nsErr)
		return *fb, nil, nil
	}
	return cxi.Member{}, nil, fmt.Errorf("%w %s: %w; configure membership.fallbackUID or fallbackGID to allow a UID/GID member", ErrNoMember, pod.Key(), nsErr)
}

// rollback undoes a failed bind: the engine destroys the services made
// in this call, and for a pod seen for the first time its hsn interface
// goes, then its lease and record.
func (b *binder) rollback(ctx context.Context, key string, created []checkpoint.Service, fresh bool) {
	b.eng.Rollback(ctx, key, created, fresh, func(checkpoint.Holder) bool {
		return b.eng.DropHSN(key)
	})
}

// publish writes the late-bound values where the container will find
// them: the per-allocation env file and the CDI spec.
func (b *binder) publish(ids []string, entry checkpoint.Holder, nics []*nic) error {
	return b.files.publish(cdispec.AllocationKey(ids), b.eng.Env(entry, nicNames(nics)))
}

func nicNames(nics []*nic) []string {
	out := make([]string, len(nics))
	for i, n := range nics {
		out[i] = n.name
	}
	return out
}

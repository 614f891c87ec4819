package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	"github.com/slingshot-k8s/slingshot/internal/keylock"
)

// serviceDriver is one NIC's CXI services; *cxi.Client is one. Only the
// engine's Fabric (b.fab) calls it.
type serviceDriver = engine.Driver

// vniLeaser is what the pod path needs of the controller;
// *controllerclient.Client is one.
type vniLeaser = engine.Leaser

// leaseOf is the lease a pod record holds.
func leaseOf(p *checkpoint.Pod) controllerclient.Lease {
	return controllerclient.Lease{Key: p.LeaseKey, VNI: p.VNI, Scope: controllerclient.Scope(p.Scope), Local: p.Local}
}

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

// netnsFinder opens a pod's network namespace from its UID.
type netnsFinder interface {
	Open(ctx context.Context, podUID string) (nsHandle, error)
}

// ErrNoMember is returned by PreStart when the pod's network namespace
// cannot be found and no fallback member is configured: the agent never
// makes a service with open membership.
var ErrNoMember = errors.New("no service member for the pod")

// policy is the part of the configuration the pod path reads; it is
// swapped whole when the configuration reloads.
type policy struct {
	tcs      cxi.TrafficClasses
	limits   *cxi.Limits
	fallback *cxi.Member
	// hsn is, by resource, the hsn interface its pods get; absent: none.
	hsn map[string]hsnPolicy
	// jobs is what a pod may ask for its services (jobOptions); adjust
	// fits reservations to the NIC less its system services' (jobs.go).
	jobs   *jobpolicy.Policy
	adjust bool
}

// nic is one NIC as the pod path uses it.
type nic struct {
	name    string // "cxi0"
	index   int
	devPath string // host path of /dev/cxiN
	netdev  string // the NIC's hsn netdev, "hsn0"; empty if it has none
	drv     serviceDriver
}

// binder programs CXI services for pods: at PreStartContainer it binds,
// when a pod is gone it cleans up, and at start it reconciles the driver
// with its checkpoint. Its methods are safe for concurrent use.
//
// Its state lives in three places, each with one job: the store (the
// durable record of each pod's lease, services and devices), the holds
// (which local pods hold each controller lease) and the NICs (fixed at
// start). Its one lock orders the steps of one pod and guards no data.
type binder struct {
	node     string
	resource string
	logger   *slog.Logger
	nics     map[string]*nic   // by NIC name
	devNIC   map[string]string // NIC resource device ID → NIC name
	// resolve maps each served resource's device IDs to the NICs they
	// bind: the NIC resource's shares, or a GPU unit's nearest NICs.
	resolve map[string]func(ids []string) ([]*nic, error)
	// leases counts the local holders of each controller lease (pods;
	// claims in DRA mode), ns keeps the namespaces services name open:
	// both are the engine's, shared with the DRA front end.
	leases *engine.Leases
	// fab creates, binds and destroys the pods' services: the engine's,
	// over nics.
	fab   *engine.Fabric
	pods  podFinder
	netns netnsFinder
	// annotations reads a pod's annotations from the API server where the
	// runtime did not report them; nil without an API server.
	annotations annotationReader
	ns          engine.Namespaces
	// addrs allocates the pods' hsn addresses, linker puts their hsn
	// interfaces in place; addrs is nil where the node has no IPAM.
	addrs   addressAllocator
	linker  hsnLinker
	files   *allocFiles
	store   *checkpoint.Store
	metrics *metrics
	// events tells the pods and the node what only the log would know.
	events eventRecorder
	now    func() time.Time
	pol    atomic.Pointer[policy]

	// podLocks orders the steps of one pod: one bind or cleanup at a
	// time. An allocation's files have their own order (allocFiles),
	// always taken after the pod's.
	podLocks keylock.Set

	cleaning sync.Map // pod key → struct{}: cleanups in flight
}

func (b *binder) policy() policy { return *b.pol.Load() }

func (b *binder) setPolicy(p policy) { b.pol.Store(&p) }

// useStore makes st the binder's record, and the engine's services
// (b.fab) drive the NICs in b.nics, counting into b.metrics: the NICs are
// opened first.
func (b *binder) useStore(st *checkpoint.Store) {
	b.store = st
	st.OnWriteError(func(error) { b.metrics.checkpointErrors.Inc() })
	b.fab = engine.NewFabric(nicSet{b}, b.metrics.engine(), st.ForgetReused, b.logger)
}

// nicSet is the binder's NICs as the engine's Fabric reads them.
type nicSet struct{ b *binder }

func (s nicSet) Driver(name string) (engine.Driver, bool) {
	n, ok := s.b.nics[name]
	if !ok {
		return nil, false
	}
	return n.drv, true
}

func (s nicSet) Names() []string { return slices.Sorted(maps.Keys(s.b.nics)) }

// useLeaser leases through l, counting the recorded pods as the holders
// of their leases; the store is set first.
func (b *binder) useLeaser(l vniLeaser) {
	b.leases = engine.NewLeases(l)
	for _, p := range b.store.Pods() {
		if !p.Released {
			b.leases.Restore(p.LeaseKey, p.Key())
		}
	}
}

// save writes the record durably; the store counts failures.
func (b *binder) save() error { return b.store.Save() }

// update changes key's record in memory. A change that breaks the
// store's rules is not made: the error fails the step that needed it.
func (b *binder) update(key string, change func(*checkpoint.Pod)) (checkpoint.Pod, error) {
	p, _, err := b.store.Update(key, change)
	if err != nil {
		b.metrics.checkpointErrors.Inc()
		return p, fmt.Errorf("record of pod %s: %w", key, err)
	}
	return p, nil
}

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

// PreStart binds the container holding ids: it finds the pod, leases its
// VNI, creates a service on each of its NICs with the pod's network
// namespace as member, records it all, and publishes the late-bound
// environment. It is idempotent: a restarted container finds its services.
func (b *binder) PreStart(ctx context.Context, resource string, ids []string) (err error) {
	start := b.now()
	defer func() { b.metrics.observePreStart(start, err) }()

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
			if errors.Is(err, errAddressRefused) {
				reason = event.AddressRefused
			}
			b.events.Record(event.Pod(pod.Namespace, pod.Name, pod.UID), reason,
				fmt.Sprintf("Container %s: %v", container, err))
		}
	}()
	key := pod.Key()
	unlock := b.podLocks.Lock(key)
	defer unlock()

	if err := b.retireReplaced(ctx, pod); err != nil {
		return err
	}
	member, handle, err := b.member(ctx, pod)
	if err != nil {
		return err
	}
	// Held from here until the pod's services are destroyed; closed now
	// if no service names it when the bind ends.
	defer b.keepIfNamed(key, handle)
	netns := engine.InodeOf(handle)
	_, recorded := b.store.Get(key)
	fresh := !recorded
	if fresh {
		opts, err := b.optionsFor(ctx, pod, handle)
		if err != nil {
			return err
		}
		if err := b.record(ctx, pod, netns, shareKey(pod, handle), opts); err != nil {
			return err
		}
	}
	created, err := b.ensureServices(ctx, key, nics, member, handle)
	if err == nil {
		err = b.ensureHSN(ctx, key, resource, pod, nics, handle)
	}
	if err != nil {
		b.rollback(ctx, key, created, fresh, handle)
		return err
	}
	entry, err := b.update(key, func(p *checkpoint.Pod) {
		p.DeviceIDs[allocationRecord(container, resource)] = slices.Sorted(slices.Values(ids))
	})
	if err != nil {
		b.rollback(ctx, key, created, fresh, handle)
		return err
	}
	// The record and the published values do not depend on each other:
	// write them at once, since both wait on the disk.
	var saveErr, pubErr error
	var wg sync.WaitGroup
	wg.Go(func() { saveErr = b.save() })
	wg.Go(func() { pubErr = b.publish(ids, entry, nics) })
	wg.Wait()
	if saveErr != nil {
		b.rollback(ctx, key, created, fresh, handle)
		return saveErr
	}
	if pubErr != nil {
		return pubErr
	}
	b.logger.Info("bound pod", "pod", key, "uid", pod.UID, "container", container,
		"vni", entry.VNI, "scope", entry.Scope, "netns", netns, "nics", nicNames(nics))
	return nil
}

// record leases the VNI of a pod seen for the first time and records the
// pod durably, before any service exists, so that a crash before the next
// save leaves services a restart recognises.
func (b *binder) record(ctx context.Context, pod *podwatch.Pod, netns uint32, share string, opts *checkpoint.ServiceOptions) error {
	key := pod.Key()
	lease, err := b.acquire(ctx, pod, share)
	if err != nil {
		return err
	}
	entry := checkpoint.Pod{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		VNI: lease.VNI, Scope: string(lease.Scope), LeaseKey: lease.Key, Local: lease.Local, Netns: netns,
		Network: lease.NetworkRequest, CollEnv: engine.CollectivesEnv(lease),
		DeviceIDs: map[string][]string{}, Created: b.now().UTC(),
		Options: opts,
	}
	if err := b.store.Put(entry); err != nil {
		b.release(ctx, key, lease)
		return fmt.Errorf("record pod %s: %w", key, err)
	}
	if err := b.save(); err != nil {
		b.forget(ctx, key)
		return err
	}
	return nil
}

// acquire leases the pod's VNI and counts the pod among the lease's local
// holders; a pod of a job another local pod holds the lease of joins it
// with no controller call (share, engine.ShareKey).
func (b *binder) acquire(ctx context.Context, pod *podwatch.Pod, share string) (controllerclient.Lease, error) {
	ref := controllerclient.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	lease, err := b.leases.AcquireShared(ctx, pod.Key(), ref, share)
	if err != nil {
		return lease, fmt.Errorf("lease VNI for %s: %w", pod.Key(), err)
	}
	return lease, nil
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

// release drops key's hold on lease, and the node's hold at the controller
// with the last local holder. It reports whether the lease no longer
// needs releasing for key.
func (b *binder) release(ctx context.Context, key string, lease controllerclient.Lease) bool {
	if err := b.leases.Release(ctx, key, lease); err != nil {
		b.logger.Warn("release VNI; will retry", "pod", key, "vni", lease.VNI, "err", err)
		if p, ok := b.store.Get(key); ok {
			b.events.Record(event.Pod(p.Namespace, p.Name, p.UID), event.LeaseReleaseFailed,
				fmt.Sprintf("Releasing this node's hold on VNI %d failed: %v", lease.VNI, err))
		}
		return false
	}
	return true
}

// allocationRecord keys a container's devices of one resource in the
// checkpoint: "main@hpe.com/cxi".
func allocationRecord(container, resource string) string { return container + "@" + resource }

// retireReplaced cleans up a recorded pod of the same name but another
// UID: a StatefulSet pod recreated before its predecessor's exit was seen.
func (b *binder) retireReplaced(ctx context.Context, pod *podwatch.Pod) error {
	old, ok := b.store.Get(pod.Key())
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

// ensureServices makes sure key's record has a service on each NIC,
// carrying the pod's VNIs and admitting its namespace h alone (the
// fallback member where h is nil): one that does is kept, an unbound one
// (made again by a restart that could not verify the namespace) is bound,
// and one admitting anything else is destroyed and made again, unbound
// and then bound, so that no service names an old namespace once a new
// one is recorded. It returns the services it created in this call.
func (b *binder) ensureServices(ctx context.Context, key string, nics []*nic, member cxi.Member, h nsHandle) ([]checkpoint.Service, error) {
	entry, ok := b.store.Get(key)
	if !ok || entry.VNI == 0 {
		return nil, nil // the pod opted out of a VNI: no service to make
	}
	vnis := entry.Options.VNIs(entry.VNI)
	var missing []*nic
	var unbound []engine.Target
	for _, n := range nics {
		i := slices.IndexFunc(entry.Services, func(s checkpoint.Service) bool { return s.NIC == n.name })
		if i >= 0 {
			state, err := b.serviceState(ctx, n.name, entry.Services[i].ID, vnis, member)
			if err != nil {
				return nil, err
			}
			switch state {
			case serviceReady:
				continue // a restarted container: the service is there
			case serviceUnbound:
				unbound = append(unbound, engine.Target{NIC: n.name, ID: entry.Services[i].ID})
				continue
			}
			if _, err := b.update(key, func(p *checkpoint.Pod) {
				p.Services = slices.DeleteFunc(p.Services, func(s checkpoint.Service) bool { return s.NIC == n.name })
			}); err != nil {
				return nil, err
			}
		}
		missing = append(missing, n)
	}
	spec, err := engine.ServiceSpec(entry.VNI, entry.Options, b.policy().defaults())
	if err != nil {
		return nil, fmt.Errorf("services of %s: %w", key, err)
	}
	netns := engine.InodeOf(h)
	if h == nil {
		spec.Members = []cxi.Member{member} // the fallback UID or GID
	}
	// The record names the namespace before any service may admit it, so
	// that a crash leaves nothing a restart cannot recognise.
	if _, err := b.update(key, func(p *checkpoint.Pod) { p.Netns = netns }); err != nil {
		return nil, err
	}
	var created []checkpoint.Service
	for _, n := range missing {
		id, err := b.fab.Create(ctx, n.name, spec)
		if err != nil {
			return created, fmt.Errorf("services of %s: %w", key, err)
		}
		rec := checkpoint.Service{NIC: n.name, ID: id, VNIs: slices.Clone(spec.VNIs)}
		if _, err := b.update(key, func(p *checkpoint.Pod) { p.Services = append(p.Services, rec) }); err != nil {
			// Unrecorded, the service would be nobody's: it goes now.
			if derr := b.fab.Destroy(ctx, n.name, id); derr != nil {
				err = fmt.Errorf("%w; and destroying the unrecorded service: %w (the start-up reconcile destroys it)", err, derr)
			}
			return created, err
		}
		created = append(created, rec)
		if h != nil {
			unbound = append(unbound, engine.Target{NIC: n.name, ID: id})
		}
	}
	if h != nil && len(unbound) > 0 {
		// The handle is the engine's from here: kept while a service may
		// admit its namespace.
		if _, err := b.fab.Bind(ctx, &b.ns, key, h, unbound); err != nil {
			return created, fmt.Errorf("services of %s: %w", key, err)
		}
	}
	return created, nil
}

// serviceState is what a recorded service is good for.
type serviceState int

const (
	serviceGone    serviceState = iota // gone, or destroyed now: make another
	serviceReady                       // admits the member alone: keep it
	serviceUnbound                     // admits nobody yet: bind it
)

// serviceState reads service id on nic and tells whether it can be kept:
// it carries every VNI of vnis and admits member alone (ready) or nobody
// (unbound). One that cannot is destroyed.
func (b *binder) serviceState(ctx context.Context, nic string, id uint32, vnis []uint16, member cxi.Member) (serviceState, error) {
	svc, err := b.fab.Get(ctx, nic, id)
	switch {
	case errors.Is(err, cxi.ErrNotFound):
		return serviceGone, nil
	case err != nil:
		return serviceGone, fmt.Errorf("check service %d on %s: %w", id, nic, err)
	case !engine.CarriesAll(svc.VNIs, vnis):
	case member.Type == cxi.MemberNetNS && engine.Admits(svc, member.ID):
		return serviceReady, nil
	case member.Type == cxi.MemberNetNS && engine.Unbound(svc):
		return serviceUnbound, nil
	case member.Type != cxi.MemberNetNS && svc.Enabled && slices.Equal(svc.Members, []cxi.Member{member}):
		return serviceReady, nil
	}
	if err := b.fab.Destroy(ctx, nic, id); err != nil {
		return serviceGone, fmt.Errorf("replace a stale service: %w", err)
	}
	return serviceGone, nil
}

// rollback undoes a failed bind: the services made in this call, and for a
// pod seen for the first time its hsn interface (in the namespace h),
// lease and record.
func (b *binder) rollback(ctx context.Context, key string, created []checkpoint.Service, fresh bool, h nsHandle) {
	for _, s := range created {
		if err := b.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			b.logger.Error("rollback: destroy service", "nic", s.NIC, "id", s.ID, "err", err)
			continue // stays recorded; cleanup retries it
		}
		b.dropService(key, s)
	}
	if entry, ok := b.store.Get(key); fresh && ok && len(entry.Services) == 0 && b.dropHSN(key, h) {
		b.forget(ctx, key)
		return
	}
	if err := b.save(); err != nil {
		b.logger.Error("rollback: save checkpoint", "err", err)
	}
}

// dropService removes the destroyed service s from key's record. A removal
// breaks no rule of the store; one refused all the same is an error the
// operator must see, and s stays recorded (its destroy is retried).
func (b *binder) dropService(key string, s checkpoint.Service) {
	if _, err := b.update(key, func(p *checkpoint.Pod) {
		p.Services = slices.DeleteFunc(p.Services, func(x checkpoint.Service) bool { return x.NIC == s.NIC && x.ID == s.ID })
	}); err != nil {
		b.logger.Error("drop a destroyed service from the record", "pod", key, "nic", s.NIC, "id", s.ID, "err", err)
	}
}

// forget releases a pod's lease and drops its record.
func (b *binder) forget(ctx context.Context, key string) {
	entry, ok := b.store.Get(key)
	if !ok {
		return
	}
	if !entry.Released && !b.release(ctx, key, leaseOf(&entry)) {
		return // kept; the cleanup loop retries
	}
	b.store.Delete(key)
	b.ns.Release(key)
	if err := b.save(); err != nil {
		b.logger.Error("save checkpoint", "err", err)
	}
}

// publish writes the late-bound values where the container will find
// them: the per-allocation env file and the CDI spec.
func (b *binder) publish(ids []string, entry checkpoint.Pod, nics []*nic) error {
	return b.files.publish(cdispec.AllocationKey(ids), b.envFor(entry, nics))
}

// envFor returns the SLINGSHOT_* environment of a container using nics.
func (b *binder) envFor(entry checkpoint.Pod, nics []*nic) []string {
	bind := engine.Binding{VNI: entry.VNI, Extra: engine.Extra(entry.Options), TCs: engine.TCs(entry.Options, b.policy().defaults())}
	for _, n := range nics {
		bind.NICs = append(bind.NICs, n.name)
		var id uint32
		if i := slices.IndexFunc(entry.Services, func(s checkpoint.Service) bool { return s.NIC == n.name }); i >= 0 {
			id = entry.Services[i].ID
		}
		bind.Services = append(bind.Services, id)
	}
	return append(engine.Env(bind), entry.CollEnv...)
}

func nicNames(nics []*nic) []string {
	out := make([]string, len(nics))
	for i, n := range nics {
		out[i] = n.name
	}
	return out
}

// keepIfNamed keeps h for pod while pod's record has a service whose
// member is h's namespace, replacing (and closing) the handle kept
// before; otherwise it lets h go. A nil h is nothing to keep.
func (b *binder) keepIfNamed(pod string, h nsHandle) {
	if h == nil {
		return
	}
	if p, ok := b.store.Get(pod); ok && len(p.Services) > 0 && p.Netns == h.Inode() {
		b.ns.Keep(pod, h)
		return
	}
	if engine.Same(b.ns.Get(pod), h) {
		b.ns.Release(pod) // a bind kept it, and its services are gone
		return
	}
	_ = h.Close()
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// serviceDriver is what the pod path needs of one NIC's CXI services;
// *cxi.Client is one.
type serviceDriver interface {
	Create(ctx context.Context, spec cxi.ServiceSpec) (cxi.Service, error)
	Destroy(ctx context.Context, id uint32) error
	Get(ctx context.Context, id uint32) (cxi.Service, error)
	List(ctx context.Context) ([]cxi.Service, error)
}

// vniLeaser is what the pod path needs of the controller;
// *controllerclient.Client is one.
type vniLeaser interface {
	AcquireJobVNI(ctx context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error)
	ReleaseJobVNI(ctx context.Context, lease controllerclient.Lease) error
}

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

// netnsFinder finds a pod's network namespace inode from its UID.
type netnsFinder interface {
	Netns(ctx context.Context, podUID string) (uint32, error)
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
}

// nic is one NIC as the pod path uses it.
type nic struct {
	name    string // "cxi0"
	index   int
	devPath string // host path of /dev/cxiN
	drv     serviceDriver
}

// binder programs CXI services for pods: at PreStartContainer it binds,
// when a pod is gone it cleans up, and at start it reconciles the driver
// with its checkpoint. Its methods are safe for concurrent use.
type binder struct {
	node     string
	resource string
	logger   *slog.Logger
	nics     map[string]*nic   // by NIC name
	devNIC   map[string]string // NIC resource device ID → NIC name
	// resolve maps each served resource's device IDs to the NICs they
	// bind: the NIC resource's shares, or a GPU unit's nearest NICs.
	resolve  map[string]func(ids []string) ([]*nic, error)
	leaser   vniLeaser
	pods     podFinder
	netns    netnsFinder
	cdi      *cdispec.Writer // nil when CDI is off
	allocDir string          // per-allocation directories
	ckptPath string
	metrics  *metrics
	now      func() time.Time

	policyMu sync.RWMutex
	pol      policy

	podLocks keyedMutex // one bind or cleanup per pod at a time
	// allocLocks orders the writes and removals of one allocation's files
	// (by cdispec.AllocationKey), which pods holding the same devices one
	// after the other share.
	allocLocks keyedMutex

	mu      sync.Mutex // guards state and gen
	state   *checkpoint.State
	gen     uint64
	saveMu  sync.Mutex // orders checkpoint writes
	written uint64

	cleaning sync.Map // pod key → struct{}: cleanups in flight
}

func (b *binder) policy() policy {
	b.policyMu.RLock()
	defer b.policyMu.RUnlock()
	return b.pol
}

func (b *binder) setPolicy(p policy) {
	b.policyMu.Lock()
	b.pol = p
	b.policyMu.Unlock()
}

// save writes the current state durably. Concurrent saves are ordered by
// generation, so an older snapshot never overwrites a newer one.
func (b *binder) save() error {
	b.mu.Lock()
	b.gen++
	gen := b.gen
	snap := b.state.Clone()
	b.mu.Unlock()

	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	if gen <= b.written {
		return nil // a newer state is already on disk
	}
	if err := checkpoint.Save(b.ckptPath, snap); err != nil {
		b.metrics.checkpointErrors.Inc()
		return fmt.Errorf("save checkpoint: %w", err)
	}
	b.written = gen
	return nil
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
	unlock := b.podLocks.Lock(pod.Key())
	defer unlock()

	if err := b.retireReplaced(ctx, pod); err != nil {
		return err
	}
	member, netns, err := b.member(ctx, pod)
	if err != nil {
		return err
	}

	b.mu.Lock()
	entry := b.state.Pods[pod.Key()]
	b.mu.Unlock()
	fresh := entry == nil
	if fresh {
		ref := controllerclient.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		lease, err := b.leaser.AcquireJobVNI(ctx, ref)
		if err != nil {
			return fmt.Errorf("lease VNI for %s: %w", pod.Key(), err)
		}
		entry = &checkpoint.Pod{
			UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
			VNI: lease.VNI, Scope: string(lease.Scope), LeaseKey: lease.Key, Local: lease.Local, Netns: netns,
			DeviceIDs: map[string][]string{}, Created: b.now().UTC(),
		}
		// Recorded before any service exists, so that a crash between
		// here and the next save leaves services a restart recognises.
		b.mu.Lock()
		b.state.Pods[pod.Key()] = entry
		b.mu.Unlock()
		if err := b.save(); err != nil {
			b.forget(ctx, pod.Key(), entry)
			return err
		}
	}

	created, err := b.ensureServices(ctx, pod.Key(), entry, nics, member, netns)
	if err != nil {
		b.rollback(ctx, pod.Key(), entry, created, fresh)
		return err
	}
	b.mu.Lock()
	entry.DeviceIDs[allocationRecord(container, resource)] = slices.Sorted(slices.Values(ids))
	b.mu.Unlock()
	// The record and the published values do not depend on each other:
	// write them at once, since both wait on the disk.
	var saveErr, pubErr error
	var wg sync.WaitGroup
	wg.Go(func() { saveErr = b.save() })
	wg.Go(func() { pubErr = b.publish(ids, entry, nics) })
	wg.Wait()
	if saveErr != nil {
		b.rollback(ctx, pod.Key(), entry, created, fresh)
		return saveErr
	}
	if pubErr != nil {
		return pubErr
	}
	b.logger.Info("bound pod", "pod", pod.Key(), "uid", pod.UID, "container", container,
		"vni", entry.VNI, "scope", entry.Scope, "netns", netns, "nics", nicNames(nics))
	return nil
}

// allocationRecord keys a container's devices of one resource in the
// checkpoint: "main@hpe.com/cxi".
func allocationRecord(container, resource string) string { return container + "@" + resource }

// retireReplaced cleans up a recorded pod of the same name but another
// UID: a StatefulSet pod recreated before its predecessor's exit was seen.
func (b *binder) retireReplaced(ctx context.Context, pod *podwatch.Pod) error {
	b.mu.Lock()
	old := b.state.Pods[pod.Key()]
	b.mu.Unlock()
	if old == nil || old.UID == "" || pod.UID == "" || old.UID == pod.UID {
		return nil
	}
	b.logger.Info("pod was replaced; cleaning up its predecessor", "pod", pod.Key(), "old_uid", old.UID, "uid", pod.UID)
	if done := b.cleanupLocked(ctx, pod.Key()); !done {
		return fmt.Errorf("pod %s replaced, but the services of its predecessor %s are still busy", pod.Key(), old.UID)
	}
	return nil
}

// member chooses the services' member: the pod's network namespace, or
// the configured fallback UID/GID where the namespace cannot be found.
func (b *binder) member(ctx context.Context, pod *podwatch.Pod) (cxi.Member, uint32, error) {
	var nsErr error
	if pod.UID == "" {
		nsErr = errors.New("pod UID unknown (the kubelet checkpoint did not name it)")
	} else if ino, err := b.netns.Netns(ctx, pod.UID); err == nil {
		return cxi.Member{Type: cxi.MemberNetNS, ID: ino}, ino, nil
	} else {
		nsErr = err
	}
	if fb := b.policy().fallback; fb != nil {
		b.logger.Warn("pod network namespace not found; using the configured fallback member",
			"pod", pod.Key(), "member", fb.String(), "err", nsErr)
		return *fb, 0, nil
	}
	return cxi.Member{}, 0, fmt.Errorf("%w %s: %w; configure membership.fallbackUID or fallbackGID to allow a UID/GID member", ErrNoMember, pod.Key(), nsErr)
}

// ensureServices makes sure entry has a live service on each NIC, with
// the right member. It returns the services it created in this call.
func (b *binder) ensureServices(ctx context.Context, key string, entry *checkpoint.Pod, nics []*nic, member cxi.Member, netns uint32) ([]checkpoint.Service, error) {
	if entry.VNI == 0 {
		return nil, nil // the pod opted out of a VNI: no service to make
	}
	pol := b.policy()
	var created []checkpoint.Service
	for _, n := range nics {
		b.mu.Lock()
		i := slices.IndexFunc(entry.Services, func(s checkpoint.Service) bool { return s.NIC == n.name })
		var have checkpoint.Service
		if i >= 0 {
			have = entry.Services[i]
		}
		stale := entry.Netns != netns // the sandbox, and so its netns, was recreated
		b.mu.Unlock()
		if i >= 0 {
			svc, err := n.drv.Get(ctx, have.ID)
			switch {
			case err == nil && !stale && slices.Contains(svc.VNIs, entry.VNI):
				continue // a restarted container: the service is there
			case err == nil:
				if derr := n.drv.Destroy(ctx, have.ID); derr != nil && !errors.Is(derr, cxi.ErrNotFound) {
					return created, fmt.Errorf("replace stale service %d on %s: %w", have.ID, n.name, derr)
				}
			case !errors.Is(err, cxi.ErrNotFound):
				return created, fmt.Errorf("check service %d on %s: %w", have.ID, n.name, err)
			}
			b.mu.Lock()
			entry.Services = slices.DeleteFunc(entry.Services, func(s checkpoint.Service) bool { return s.NIC == n.name })
			b.mu.Unlock()
		}
		spec := cxi.ServiceSpec{VNIs: []uint16{entry.VNI}, Members: []cxi.Member{member}, TCs: pol.tcs, Limits: pol.limits}
		svc, err := n.drv.Create(ctx, spec)
		if err != nil {
			b.metrics.serviceErrors.WithLabelValues(n.name, "create").Inc()
			return created, fmt.Errorf("create service on %s for %s: %w", n.name, key, err)
		}
		rec := checkpoint.Service{NIC: n.name, ID: svc.ID, VNIs: []uint16{entry.VNI}}
		created = append(created, rec)
		b.mu.Lock()
		entry.Services = append(entry.Services, rec)
		entry.Netns = netns
		b.mu.Unlock()
	}
	return created, nil
}

// rollback undoes a failed bind: the services made in this call, and for a
// pod seen for the first time its lease and record.
func (b *binder) rollback(ctx context.Context, key string, entry *checkpoint.Pod, created []checkpoint.Service, fresh bool) {
	for _, s := range created {
		if err := b.nics[s.NIC].drv.Destroy(ctx, s.ID); err != nil && !errors.Is(err, cxi.ErrNotFound) {
			b.logger.Error("rollback: destroy service", "nic", s.NIC, "id", s.ID, "err", err)
			continue // stays recorded; cleanup retries it
		}
		b.mu.Lock()
		entry.Services = slices.DeleteFunc(entry.Services, func(x checkpoint.Service) bool { return x.NIC == s.NIC && x.ID == s.ID })
		b.mu.Unlock()
	}
	if fresh {
		b.mu.Lock()
		left := len(entry.Services)
		b.mu.Unlock()
		if left == 0 {
			b.forget(ctx, key, entry)
			return
		}
	}
	if err := b.save(); err != nil {
		b.logger.Error("rollback: save checkpoint", "err", err)
	}
}

// forget releases a pod's lease and drops its record.
func (b *binder) forget(ctx context.Context, key string, entry *checkpoint.Pod) {
	if err := b.leaser.ReleaseJobVNI(ctx, leaseOf(entry)); err != nil {
		b.logger.Warn("release VNI", "pod", key, "vni", entry.VNI, "err", err)
		return // kept; the cleanup loop retries
	}
	b.mu.Lock()
	delete(b.state.Pods, key)
	b.mu.Unlock()
	if err := b.save(); err != nil {
		b.logger.Error("save checkpoint", "err", err)
	}
}

// Env names, as Slurm's Slingshot plugin sets them.
const (
	EnvDevices = "SLINGSHOT_DEVICES"
	EnvSvcIDs  = "SLINGSHOT_SVC_IDS"
	EnvVNIs    = "SLINGSHOT_VNIS"
	EnvTCs     = "SLINGSHOT_TCS"
)

// EnvFileName is the file in the per-container directory that holds the
// late-bound environment.
const EnvFileName = "slingshot.env"

// publish writes the late-bound values where the container will find
// them: the per-allocation env file and the CDI spec.
func (b *binder) publish(ids []string, entry *checkpoint.Pod, nics []*nic) error {
	key := cdispec.AllocationKey(ids)
	unlock := b.allocLocks.Lock(key)
	defer unlock()
	b.mu.Lock()
	env := b.envFor(entry, nics)
	b.mu.Unlock()

	dir := filepath.Join(b.allocDir, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("per-container directory: %w", err)
	}
	var content strings.Builder
	for _, kv := range env {
		content.WriteString(kv + "\n")
	}
	// Atomic but not synced: after a power loss the container is gone too,
	// and a restart republishes.
	if err := atomicfile.Replace(filepath.Join(dir, EnvFileName), []byte(content.String()), 0o644); err != nil {
		return fmt.Errorf("publish environment: %w", err)
	}
	if b.cdi != nil {
		// Only the environment: Allocate already mapped the device nodes.
		if err := b.cdi.Write(key, cdispec.Edits{Env: env}); err != nil {
			return err
		}
	}
	return nil
}

// envFor returns the SLINGSHOT_* environment of a container using nics.
// The caller holds b.mu.
func (b *binder) envFor(entry *checkpoint.Pod, nics []*nic) []string {
	var devs, ids []string
	for _, n := range nics {
		for _, s := range entry.Services {
			if s.NIC == n.name {
				devs = append(devs, n.name)
				ids = append(ids, strconv.FormatUint(uint64(s.ID), 10))
			}
		}
	}
	return []string{
		EnvDevices + "=" + strings.Join(devs, ","),
		EnvSvcIDs + "=" + strings.Join(ids, ","),
		EnvVNIs + "=" + vnisEnv(entry.VNI),
		EnvTCs + "=" + b.policy().tcs.String(),
	}
}

// vnisEnv is SLINGSHOT_VNIS: the pod's VNI, or nothing for a pod that
// opted out.
func vnisEnv(vni uint16) string {
	if vni == 0 {
		return ""
	}
	return strconv.Itoa(int(vni))
}

func nicNames(nics []*nic) []string {
	out := make([]string, len(nics))
	for i, n := range nics {
		out[i] = n.name
	}
	return out
}

// keyedMutex is a set of mutexes by key, created on demand and dropped
// when unused.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns its unlock function.
func (k *keyedMutex) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

package dra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/keylock"
)

// SpecWriter writes the claims' CDI specs; *cdispec.Writer is one.
type SpecWriter interface {
	DeviceName(key string) string
	Write(key string, edits cdispec.Edits) error
	Remove(key string) error
}

// NICDevice is a NIC the claims may be allocated.
type NICDevice struct {
	Name    string // "cxi0", also the device name in the ResourceSlice
	DevPath string // host path of /dev/cxiN
	// Drv is the NIC's driver, which only the engine's Fabric calls.
	Drv engine.Driver
}

// Policy is the part of the agent's configuration services are made with.
type Policy struct {
	TCs    cxi.TrafficClasses
	Limits *cxi.Limits
	// Jobs is what a claim may ask for its services (jobOptions); nil:
	// the defaults. Adjust fits reservations to the NIC less its system
	// services' (jobOptions.adjustLimits).
	Jobs   *jobpolicy.Policy
	Adjust bool
}

// ManagerConfig is what a Manager is made of.
type ManagerConfig struct {
	Driver string
	Node   string
	// Store is the agent's checkpoint, where the claims are recorded
	// beside the device plugin's pods.
	Store *checkpoint.Store
	NICs  []NICDevice
	// Leases are the node's lease holds, the engine's, shared with the
	// device-plugin front end: a claim holds its lease as
	// engine.ClaimHolder(uid).
	Leases *engine.Leases
	// PodMeta returns the labels and annotations of a pod a claim is
	// reserved for, when known without asking anyone; nil, or false,
	// leases without sharing. A Job's claims on the node share one
	// controller call through it (engine.ShareKey).
	PodMeta func(namespace, name, uid string) (labels, annotations map[string]string, ok bool)
	CDI     SpecWriter
	Policy  func() Policy
	Logger  *slog.Logger
	Metrics *Metrics // nil: not measured
	// ServiceMetrics are the engine's, the device plugin's too: a failed
	// or stuck service counts the same in both modes.
	ServiceMetrics engine.Metrics
	OpenNetns      func(path string) (Netns, error)
	// Events tell the pods and the node what only the log would know;
	// nil: none.
	Events Events
	// Status writes each prepared claim's devices into its status, off
	// the kubelet's path (informational: a failure is logged and counted,
	// never fails the claim); nil: not written.
	Status *StatusQueue
	// Pins pins the namespaces the claims' services admit, so that the
	// holds outlive the agent; nil: held only while the agent runs.
	Pins engine.Pinner
	// BindBudget bounds a bind at the sandbox (Bind): the runtime gives an
	// NRI plugin a bounded time per request (containerd's
	// plugin_request_timeout, 2 s by default) and fails or goes on without
	// it past that, so a destroy retried on EBUSY must not outlast it. A
	// bind that runs out fails the sandbox, which the kubelet makes again,
	// and the next one retries. 0: DefaultBindBudget.
	BindBudget time.Duration
	// BindReady says whether a prepared claim's services can be bound
	// when its pod's sandbox starts (the runtime's NRI connection is up).
	// Prepare refuses while it returns an error: a container must not
	// start on services that admit nobody. Required: no default could
	// know, and one that said "always" would fail open.
	BindReady func() error
}

// DefaultBindBudget leaves a bind at the sandbox half a second of
// containerd's default plugin_request_timeout (2 s).
const DefaultBindBudget = 1500 * time.Millisecond

// Netns is a network namespace held open (engine.Handle): while it is,
// the kernel cannot free it, so the inode the services name cannot pass
// to another one.
type Netns = engine.Handle

// Manager prepares, binds and unprepares claims. Its methods are safe for
// concurrent use: the steps of one claim are ordered by the claim's lock;
// the lease holds are the engine's, which hold no lock across a call to
// the controller.
type Manager struct {
	cfg   ManagerConfig
	log   *slog.Logger
	nics  map[string]NICDevice
	store store
	m     *Metrics
	// fab is the engine's service lifecycle: every create, bind and
	// destroy goes through it.
	fab *engine.Fabric

	claimLocks keylock.Set
	// ns keeps open, by claim holder, the namespace the claim's services
	// admit, from the bind until they are destroyed.
	ns engine.Namespaces
}

// NewManager returns the Manager of the claims recorded in cfg.Store,
// counting them as the holders of their leases.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("dra: ManagerConfig.Store is required")
	}
	st := store{cfg.Store}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OpenNetns == nil {
		cfg.OpenNetns = OpenNetns
	}
	if cfg.Leases == nil {
		return nil, errors.New("dra: ManagerConfig.Leases is required")
	}
	if cfg.BindReady == nil {
		return nil, errors.New("dra: ManagerConfig.BindReady is required")
	}
	if cfg.Events == nil {
		cfg.Events = event.Nop{}
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, nics: map[string]NICDevice{}, store: st, m: cfg.Metrics}
	drivers := engine.DriverMap{}
	for _, n := range cfg.NICs {
		m.nics[n.Name] = n
		drivers[n.Name] = n.Drv
	}
	m.ns.Pins, m.ns.Log = cfg.Pins, cfg.Logger
	m.fab = engine.NewFabric(drivers, cfg.ServiceMetrics, cfg.Store.ForgetReused, cfg.Logger)
	for _, rec := range st.all() {
		if !rec.Released && rec.LeaseKey != "" {
			cfg.Leases.Restore(rec.LeaseKey, engine.ClaimHolder(rec.UID))
		}
	}
	return m, nil
}

// Records returns a copy of every claim record.
func (m *Manager) Records() []*Record { return m.store.all() }

// cdiKey names a claim's CDI device: the claim UID, never reused.
func cdiKey(uid string) string { return "claim-" + uid }

// Prepare prepares a claim: it leases the VNI, creates a disabled,
// memberless service on each of the claim's NICs and writes the CDI spec.
// It is idempotent: a repeated call finds what was done and makes only
// what is missing (after a reboot, the services and the spec).
func (m *Manager) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (devs []kubeletplugin.Device, err error) {
	start := time.Now()
	defer func() { m.m.observe("prepare", start, err) }()
	uid := string(claim.UID)
	if err := m.cfg.BindReady(); err != nil {
		return nil, fmt.Errorf("claim %s/%s: its services could not be bound when its pod starts: %w", claim.Namespace, claim.Name, err)
	}
	unlock := m.claimLocks.Lock(uid)
	defer unlock()

	rec, recorded := m.store.get(uid)
	if recorded && rec.Unpreparing {
		// An Unprepare stopped half-way; the kubelet wants the claim again.
		if err := m.teardown(ctx, rec); err != nil {
			return nil, fmt.Errorf("claim %s: finish the interrupted unprepare first: %w", rec.Key(), err)
		}
		recorded = false
	}
	fresh := !recorded
	if fresh {
		if rec, err = m.newRecord(claim); err != nil {
			return nil, err
		}
		if err := m.lease(ctx, rec); err != nil {
			return nil, err
		}
	} else {
		// The claim may be reserved for more pods now: those are refused
		// at their sandbox, which must know them.
		rec.Pods = podsOf(claim)
	}
	created, err := m.ensureServices(ctx, rec)
	if err == nil {
		err = m.writeSpec(rec)
	}
	if err == nil {
		rec.Prepared = true
		err = m.record(rec)
	}
	if err != nil {
		m.rollback(ctx, rec, created, fresh)
		return nil, err
	}
	m.log.Info("prepared claim", "claim", rec.Key(), "uid", uid, "vni", rec.VNI, "scope", rec.Scope, "services", rec.Services)
	m.cfg.Status.enqueue(m.statusOf(rec))
	return m.devices(rec), nil
}

// newRecord reads the claim: its devices of this driver, its pods and its
// configuration.
func (m *Manager) newRecord(claim *resourceapi.ResourceClaim) (*Record, error) {
	rec := &Record{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, Created: time.Now().UTC()}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != m.cfg.Driver {
			continue
		}
		if _, ok := m.nics[r.Device]; !ok {
			return nil, fmt.Errorf("claim %s: device %s/%s is not one of this node's", rec.Key(), r.Pool, r.Device)
		}
		rec.Results = append(rec.Results, Result{Request: r.Request, Pool: r.Pool, Device: r.Device})
	}
	rec.Pods = podsOf(claim)
	cfg, err := configOf(claim, m.cfg.Driver)
	if err != nil {
		return nil, err
	}
	rec.Config = checkpoint.ClaimConfig{VNI: cfg.VNI, EnvSuffix: cfg.EnvSuffix}
	// Checked before the lease: a refused claim holds nothing.
	if rec.Options, err = m.cfg.Policy().options(claim.Namespace, cfg.ServiceOptions); err != nil {
		return nil, fmt.Errorf("claim %s, %s serviceOptions: %w", rec.Key(), ConfigKind, err)
	}
	return rec, nil
}

// podsOf are the pods claim is reserved for.
func podsOf(claim *resourceapi.ResourceClaim) []PodRef {
	var out []PodRef
	for _, ref := range claim.Status.ReservedFor {
		if ref.Resource == "pods" && ref.APIGroup == "" {
			out = append(out, PodRef{UID: string(ref.UID), Namespace: claim.Namespace, Name: ref.Name})
		}
	}
	return out
}

// lease leases the claim's VNI and records the claim durably before any
// service exists, so that a crash leaves nothing a restart cannot find.
func (m *Manager) lease(ctx context.Context, rec *Record) error {
	if len(rec.Pods) == 0 {
		return fmt.Errorf("claim %s is reserved for no pod: whose job it serves is unknown", rec.Key())
	}
	pod := rec.Pods[0]
	ref := controllerclient.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Policy: rec.Config.VNI}
	l, err := m.cfg.Leases.AcquireShared(ctx, engine.ClaimHolder(rec.UID), ref, m.shareKey(pod, rec.Config.VNI))
	if err != nil {
		return fmt.Errorf("lease VNI for claim %s (pod %s/%s): %w", rec.Key(), pod.Namespace, pod.Name, err)
	}
	rec.LeaseKey, rec.VNI, rec.Scope, rec.Local = l.Key, l.VNI, string(l.Scope), l.Local
	rec.CollEnv = engine.CollectivesEnv(l)
	err = m.record(rec)
	if err == nil {
		return nil
	}
	m.store.remove(rec.UID)
	m.release(ctx, rec)
	return fmt.Errorf("record claim %s: %w", rec.Key(), err)
}

// shareKey names the job of the claim's pod for engine.Leases.AcquireShared:
// the pod's Job and the annotations the controller reads, and the claim's
// VNI policy, so that two claims share only what the controller would
// have answered both. "" (no sharing) when the pod's labels are unknown.
func (m *Manager) shareKey(pod PodRef, vniPolicy string) string {
	if m.cfg.PodMeta == nil {
		return ""
	}
	labels, annotations, ok := m.cfg.PodMeta(pod.Namespace, pod.Name, pod.UID)
	if !ok {
		return ""
	}
	share := engine.ShareKey(pod.Namespace, labels, annotations)
	if share == "" {
		return ""
	}
	return share + "\x00" + vniPolicy
}

// nicsOf are the claim's NICs, in allocation order, once each.
func (m *Manager) nicsOf(rec *Record) []NICDevice {
	var out []NICDevice
	for _, r := range rec.Results {
		if n, ok := m.nics[r.Device]; ok && !slices.ContainsFunc(out, func(x NICDevice) bool { return x.Name == n.Name }) {
			out = append(out, n)
		}
	}
	return out
}

// ensureServices makes sure the claim has a service on each of its NICs,
// carrying its VNI; a service the driver lost (a reboot) is made again,
// unbound. It returns the services made in this call.
func (m *Manager) ensureServices(ctx context.Context, rec *Record) ([]Service, error) {
	if rec.VNI == 0 {
		return nil, nil // vni: none; the devices alone
	}
	var created []Service
	for _, n := range m.nicsOf(rec) {
		i := slices.IndexFunc(rec.Services, func(s Service) bool { return s.NIC == n.Name })
		if i >= 0 {
			svc, err := m.fab.Get(ctx, n.Name, rec.Services[i].ID)
			switch {
			case err == nil && engine.CarriesAll(svc.VNIs, rec.Options.VNIs(rec.VNI)):
				continue
			case err == nil, errors.Is(err, cxi.ErrNotFound):
				m.log.Warn("a prepared claim's service is gone or changed; making it again", "claim", rec.Key(), "nic", n.Name, "id", rec.Services[i].ID)
				if err == nil {
					if derr := m.fab.Destroy(ctx, n.Name, rec.Services[i].ID); derr != nil {
						return created, fmt.Errorf("replace a changed service: %w", derr)
					}
				}
				rec.Services = slices.Delete(rec.Services, i, i+1)
			default:
				return created, fmt.Errorf("check service %d on %s: %w", rec.Services[i].ID, n.Name, err)
			}
		}
		s, err := m.createUnbound(ctx, rec, n)
		if err != nil {
			return created, err
		}
		created = append(created, s)
		rec.Services = append(rec.Services, s)
		if err := m.store.put(rec); err != nil {
			return created, err
		}
	}
	return created, nil
}

func (m *Manager) createUnbound(ctx context.Context, rec *Record, n NICDevice) (Service, error) {
	spec, err := engine.ServiceSpec(rec.VNI, rec.Options, m.cfg.Policy().defaults())
	if err != nil {
		return Service{}, fmt.Errorf("claim %s: %w", rec.Key(), err)
	}
	id, err := m.fab.Create(ctx, n.Name, spec)
	if err != nil {
		return Service{}, fmt.Errorf("claim %s: %w", rec.Key(), err)
	}
	return Service{NIC: n.Name, ID: id}, nil
}

// rollback undoes a failed Prepare: the services made in this call, and
// for a claim seen for the first time its lease and record.
func (m *Manager) rollback(ctx context.Context, rec *Record, created []Service, fresh bool) {
	for _, s := range created {
		if err := m.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			m.log.Error("rollback: destroy service", "claim", rec.Key(), "nic", s.NIC, "id", s.ID, "err", err)
			continue // stays recorded: Unprepare or a retried Prepare takes it
		}
		rec.Services = slices.DeleteFunc(rec.Services, func(x Service) bool { return x == s })
	}
	if fresh && len(rec.Services) == 0 {
		_ = m.cfg.CDI.Remove(cdiKey(rec.UID))
		if m.release(ctx, rec) {
			m.store.remove(rec.UID)
		} else if err := m.store.put(rec); err != nil {
			m.log.Error("rollback: record", "claim", rec.Key(), "err", err)
		}
	} else if err := m.store.put(rec); err != nil {
		m.log.Error("rollback: record", "claim", rec.Key(), "err", err)
	}
	if err := m.store.save(); err != nil {
		m.log.Error("rollback: save", "err", err)
	}
}

// release gives up the claim's hold on its lease: at the controller when
// no other holder of this node holds it. It reports whether the hold is
// gone; a failed release is retried by calling it again.
func (m *Manager) release(ctx context.Context, rec *Record) bool {
	if rec.Released {
		return true
	}
	l := controllerclient.Lease{Key: rec.LeaseKey, VNI: rec.VNI, Scope: controllerclient.Scope(rec.Scope), Local: rec.Local}
	if err := m.cfg.Leases.Release(ctx, engine.ClaimHolder(rec.UID), l); err != nil {
		m.log.Warn("release VNI; will retry", "claim", rec.Key(), "vni", rec.VNI, "err", err)
		return false
	}
	rec.Released = true
	return true
}

// env is the claim's SLINGSHOT_* environment, and the variable that names
// the claim to the container guard (claimMarker).
func (m *Manager) env(rec *Record) []string {
	b := engine.Binding{VNI: rec.VNI, Extra: engine.Extra(rec.Options), TCs: engine.TCs(rec.Options, m.cfg.Policy().defaults()), Suffix: rec.Config.EnvSuffix}
	for _, n := range m.nicsOf(rec) {
		b.NICs = append(b.NICs, n.Name)
		var id uint32
		if i := slices.IndexFunc(rec.Services, func(s Service) bool { return s.NIC == n.Name }); i >= 0 {
			id = rec.Services[i].ID
		}
		b.Services = append(b.Services, id)
	}
	return append(append(engine.Env(b), rec.CollEnv...), claimMarker(rec))
}

// claimMarkerPrefix starts the variable each claim's CDI spec sets in its
// containers, named by the claim's UID so that two claims never collide.
// The kubelet prepares a claim once for all the pods that share it, so
// the agent hears of the second pod only through its containers: the
// marker is how the container guard knows which claims a container
// carries.
const claimMarkerPrefix = "SLINGSHOT_CLAIM_"

func claimMarker(rec *Record) string {
	return claimMarkerPrefix + markerName(rec.UID) + "=" + rec.UID
}

// markerName makes a UID an environment variable name's tail.
func markerName(uid string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, uid)
}

// markedClaims are the claim UIDs a container's environment carries.
func markedClaims(env []string) []string {
	var out []string
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, claimMarkerPrefix) && k == claimMarkerPrefix+markerName(v) {
			out = append(out, v)
		}
	}
	return out
}

// writeSpec writes the claim's CDI spec: its device nodes and environment.
func (m *Manager) writeSpec(rec *Record) error {
	var nodes []string
	for _, r := range rec.Results {
		if n, ok := m.nics[r.Device]; ok && !slices.Contains(nodes, n.DevPath) {
			nodes = append(nodes, n.DevPath)
		}
	}
	if err := m.cfg.CDI.Write(cdiKey(rec.UID), cdispec.Edits{Env: m.env(rec), DeviceNodes: nodes}); err != nil {
		return fmt.Errorf("claim %s: %w", rec.Key(), err)
	}
	return nil
}

// devices is Prepare's answer: each allocated device, the first carrying
// the claim's CDI device (one spec has every node and the environment).
func (m *Manager) devices(rec *Record) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(rec.Results))
	for i, r := range rec.Results {
		d := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device}
		if i == 0 {
			d.CDIDeviceIDs = []string{m.cfg.CDI.DeviceName(cdiKey(rec.UID))}
		}
		out = append(out, d)
	}
	return out
}

// Unprepare undoes Prepare for claim uid: it destroys the services,
// removes the CDI spec and releases the VNI. A claim it does not know is
// not an error (the kubelet may ask twice). What cannot be undone yet
// (a service still busy, the controller unreachable) stays recorded, and
// the error asks the kubelet to call again.
func (m *Manager) Unprepare(ctx context.Context, uid string) (err error) {
	start := time.Now()
	defer func() { m.m.observe("unprepare", start, err) }()
	unlock := m.claimLocks.Lock(uid)
	defer unlock()
	rec, ok := m.store.get(uid)
	if !ok {
		return nil
	}
	if !rec.Unpreparing {
		rec.Unpreparing = true
		if err := m.record(rec); err != nil {
			return err
		}
	}
	if err := m.teardown(ctx, rec); err != nil {
		return err
	}
	m.log.Info("unprepared claim", "claim", rec.Key(), "uid", uid, "vni", rec.VNI)
	return nil
}

// teardown destroys what the record holds and drops it, recording its
// progress so that a later call resumes. The claim's lock is held.
func (m *Manager) teardown(ctx context.Context, rec *Record) error {
	var errs []error
	for _, s := range slices.Clone(rec.Services) {
		if err := m.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		rec.Services = slices.DeleteFunc(rec.Services, func(x Service) bool { return x == s })
	}
	if len(errs) == 0 {
		m.ns.Release(engine.ClaimHolder(rec.UID))
		if err := m.cfg.CDI.Remove(cdiKey(rec.UID)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && !m.release(ctx, rec) {
		errs = append(errs, fmt.Errorf("release VNI %d of claim %s: the controller did not answer", rec.VNI, rec.Key()))
	}
	if len(errs) == 0 {
		m.store.remove(rec.UID)
	} else if err := m.store.put(rec); err != nil {
		errs = append(errs, err)
	}
	if err := m.store.save(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("unprepare claim %s: %w", rec.Key(), errors.Join(errs...))
	}
	return nil
}

// ErrNotBound is returned when a pod's services do not admit its current
// network namespace: its containers must not start.
var ErrNotBound = errors.New("CXI services not bound to the pod's network namespace")

// Sandbox is a pod's sandbox as the runtime reports it.
type Sandbox struct {
	UID, Namespace, Name string
	// NetnsPath is the sandbox's network namespace; empty when the pod
	// shares the host's (hostNetwork).
	NetnsPath string
}

func (s Sandbox) key() string { return s.Namespace + "/" + s.Name }

// claimsOf are the UIDs of the records reserved for pod uid.
func (m *Manager) claimsOf(uid string) []string {
	var out []string
	for _, r := range m.store.all() {
		if r.ReservedFor(uid) {
			out = append(out, r.UID)
		}
	}
	return out
}

// Bind admits the sandbox's network namespace to the services of every
// claim reserved for its pod and enables them. A sandbox made again (a
// new namespace) gets new services on the same VNI, and the claim's CDI
// spec names them. A pod with claims but no namespace of its own is
// refused: the member would be the host's namespace.
func (m *Manager) Bind(ctx context.Context, sb Sandbox) (err error) {
	uids := m.claimsOf(sb.UID)
	if len(uids) == 0 {
		return nil
	}
	start := time.Now()
	defer func() { m.m.observe("bind", start, err) }()
	budget := m.cfg.BindBudget
	if budget <= 0 {
		budget = DefaultBindBudget
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if sb.NetnsPath == "" {
		return fmt.Errorf("%w: pod %s has claims of %s but no network namespace of its own (hostNetwork); a service admitting the host's namespace would admit every host process",
			ErrNotBound, sb.key(), m.cfg.Driver)
	}
	if err := m.checkSuffixes(uids, sb); err != nil {
		return err
	}
	var errs []error
	for _, uid := range uids {
		if err := m.bindClaim(ctx, uid, sb); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) bindClaim(ctx context.Context, uid string, sb Sandbox) error {
	unlock := m.claimLocks.Lock(uid)
	defer unlock()
	rec, ok := m.store.get(uid)
	switch {
	case !ok:
		return nil // unprepared meanwhile
	case rec.Unpreparing || !rec.Prepared:
		return fmt.Errorf("%w: claim %s is not prepared", ErrNotBound, rec.Key())
	case rec.BoundPod != "" && rec.BoundPod != sb.UID:
		return fmt.Errorf("%w: %w", ErrNotBound, sharedClaimError(sharedClaimMessage(rec, sb)))
	}
	ns, err := m.cfg.OpenNetns(sb.NetnsPath)
	if err != nil {
		return fmt.Errorf("%w: pod %s: %w", ErrNotBound, sb.key(), err)
	}
	inode := ns.Inode()
	replaced, err := m.replaceStale(ctx, rec, inode)
	if err != nil {
		_ = ns.Close()
		return fmt.Errorf("%w: claim %s: %w", ErrNotBound, rec.Key(), err)
	}
	targets := make([]engine.Target, 0, len(rec.Services))
	for _, s := range rec.Services {
		targets = append(targets, engine.Target{NIC: s.NIC, ID: s.ID})
	}
	holder := engine.ClaimHolder(uid)
	bound, err := m.fab.Bind(ctx, &m.ns, holder, ns, targets)
	for i := range bound {
		rec.Services[i].Netns = inode
	}
	if err != nil {
		// The failed service may admit the namespace too (the driver took
		// the member, then failed to enable): all of them go back to
		// unbound, so that no service admits the pod and the claim can
		// bind again.
		if bound < len(targets) {
			rec.Services[bound].Netns = inode
		}
		return fmt.Errorf("%w: claim %s: %w", ErrNotBound, rec.Key(), errors.Join(err, m.unbindAll(ctx, rec, inode)))
	}
	rec.BoundPod, rec.BoundNetns = sb.UID, sb.NetnsPath
	if err := m.store.put(rec); err != nil {
		return fmt.Errorf("%w: %w", ErrNotBound, errors.Join(err, m.unbindAll(ctx, rec, inode)))
	}
	if replaced {
		if err := m.writeSpec(rec); err != nil {
			return fmt.Errorf("%w: %w", ErrNotBound, errors.Join(err, m.unbindAll(ctx, rec, inode)))
		}
	}
	if err := m.store.save(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotBound, errors.Join(err, m.unbindAll(ctx, rec, inode)))
	}
	m.log.Info("bound claim", "claim", rec.Key(), "pod", sb.key(), "netns", inode, "vni", rec.VNI, "replaced", replaced)
	if replaced {
		m.cfg.Status.enqueue(m.statusOf(rec)) // new service IDs
	}
	return nil
}

// checkSuffixes refuses a pod two of whose claims would set the same
// SLINGSHOT_* names: each claim's CDI spec sets its own values, and the
// runtime would refuse the clash with a message that names neither the
// claims nor the fix.
func (m *Manager) checkSuffixes(uids []string, sb Sandbox) error {
	bySuffix := map[string]string{}
	for _, uid := range uids {
		rec, ok := m.store.get(uid)
		if !ok {
			continue
		}
		if other, clash := bySuffix[rec.Config.EnvSuffix]; clash {
			names := "SLINGSHOT_DEVICES, SLINGSHOT_VNIS, ..."
			if rec.Config.EnvSuffix != "" {
				names = "SLINGSHOT_DEVICES_" + rec.Config.EnvSuffix + ", ..."
			}
			return fmt.Errorf("%w: pod %s has ResourceClaims %s and %s of %s that both set %s; give each claim but one its own envSuffix in its CXIClaimConfig (apiVersion %s, kind %s), e.g. envSuffix: STORAGE",
				ErrNotBound, sb.key(), other, rec.Key(), m.cfg.Driver, names, ConfigAPIVersion, ConfigKind)
		}
		bySuffix[rec.Config.EnvSuffix] = rec.Key()
	}
	return nil
}

// sharedClaimMessage says why a second pod of a claim is refused, and
// what to do, for the person reading the pod's events.
func sharedClaimMessage(rec *Record, sb Sandbox) string {
	holder := "with UID " + rec.BoundPod
	if i := slices.IndexFunc(rec.Pods, func(p PodRef) bool { return p.UID == rec.BoundPod }); i >= 0 {
		holder = rec.Pods[i].Namespace + "/" + rec.Pods[i].Name
	}
	return fmt.Sprintf("ResourceClaim %s is in use by pod %s on this node: a claim's CXI services admit one pod's network namespace, so pod %s cannot share it; give each pod its own claim with a ResourceClaimTemplate (spec.resourceClaims[].resourceClaimTemplateName), whose claims of one Job share its VNI",
		rec.Key(), holder, sb.key())
}

// replaceStale replaces the services that admit a namespace other than
// inode (the sandbox was made again: the driver cannot drop a member)
// with unbound ones on the same VNI, recording each step durably. It
// reports whether any was replaced (the CDI spec must name the new IDs).
func (m *Manager) replaceStale(ctx context.Context, rec *Record, inode uint32) (bool, error) {
	replaced := false
	for i, s := range rec.Services {
		if s.Netns == 0 || s.Netns == inode {
			continue
		}
		if err := m.renew(ctx, rec, i); err != nil {
			return replaced, err
		}
		replaced = true
	}
	if !replaced {
		return false, nil
	}
	// No service names the old namespace now: its handle may go.
	m.ns.Release(engine.ClaimHolder(rec.UID))
	return true, nil
}

// renew destroys rec's i-th service and makes a new, unbound one on its
// NIC, recording the change durably before and after, so that a crash
// leaves nothing a restart cannot find.
func (m *Manager) renew(ctx context.Context, rec *Record, i int) error {
	s := rec.Services[i]
	n := m.nics[s.NIC]
	if err := m.fab.Destroy(ctx, s.NIC, s.ID); err != nil {
		return fmt.Errorf("replace a service: %w", err)
	}
	rec.Services = slices.Delete(rec.Services, i, i+1)
	fresh, err := m.createUnbound(ctx, rec, n)
	if err != nil {
		// The claim lacks a service on n now: its containers are refused
		// (Check) until a Prepare or Reconcile makes it again.
		return errors.Join(err, m.record(rec))
	}
	rec.Services = slices.Insert(rec.Services, i, fresh)
	// Recorded in memory even when the write fails: Unprepare destroys it,
	// and after a crash the start-up reconcile destroys an unbound service
	// no record names.
	return m.record(rec)
}

// record stores rec and writes it durably.
func (m *Manager) record(rec *Record) error {
	if err := m.store.put(rec); err != nil {
		return err
	}
	return m.store.save()
}

// unbindAll undoes a bind that failed part-way: every service that may
// admit inode is replaced by an unbound one, and once none does the
// namespace is let go. What cannot be replaced stays recorded as
// admitting inode, with the namespace held, until the next bind or the
// Unprepare replaces or destroys it.
func (m *Manager) unbindAll(ctx context.Context, rec *Record, inode uint32) error {
	var errs []error
	for _, s := range slices.Clone(rec.Services) {
		i := slices.Index(rec.Services, s)
		if s.Netns != inode || i < 0 {
			continue
		}
		if err := m.renew(ctx, rec, i); err != nil {
			errs = append(errs, err)
		}
	}
	rec.BoundPod, rec.BoundNetns = "", ""
	if err := m.record(rec); err != nil {
		errs = append(errs, err)
	}
	if !slices.ContainsFunc(rec.Services, func(s Service) bool { return s.Netns == inode }) {
		m.ns.Release(engine.ClaimHolder(rec.UID))
	}
	if len(errs) > 0 {
		return fmt.Errorf("undo the bind: %w", errors.Join(errs...))
	}
	return nil
}

// Check reports whether a container of the sandbox's pod may start: every
// service of every claim reserved for its pod, or named by the
// container's environment (env, as the runtime will start it: the
// claims' CDI specs set claimMarker), admits the sandbox's current
// namespace alone and is enabled, as the driver says now. It returns the
// environment that names the services as they are, for the runtime to
// set over the CDI spec's (which a replaced service made stale).
func (m *Manager) Check(ctx context.Context, sb Sandbox, env []string) ([]string, error) {
	uids := m.claimsOf(sb.UID)
	for _, uid := range markedClaims(env) {
		if !slices.Contains(uids, uid) {
			uids = append(uids, uid)
		}
	}
	if len(uids) == 0 {
		return nil, nil
	}
	if sb.NetnsPath == "" {
		return nil, fmt.Errorf("%w: pod %s has no network namespace of its own", ErrNotBound, sb.key())
	}
	ns, err := m.cfg.OpenNetns(sb.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s: %w", ErrNotBound, sb.key(), err)
	}
	inode := ns.Inode()
	_ = ns.Close()
	var out []string
	for _, uid := range uids {
		rec, ok := m.store.get(uid)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: the container carries claim %s, which this node has not prepared", ErrNotBound, uid)
		case rec.BoundPod != "" && rec.BoundPod != sb.UID:
			return nil, fmt.Errorf("%w: %w", ErrNotBound, sharedClaimError(sharedClaimMessage(rec, sb)))
		case rec.BoundPod != sb.UID:
			return nil, fmt.Errorf("%w: claim %s was never bound to pod %s", ErrNotBound, rec.Key(), sb.key())
		}
		if missing := m.missingServices(rec); len(missing) > 0 {
			return nil, fmt.Errorf("%w: claim %s has no service on %s", ErrNotBound, rec.Key(), strings.Join(missing, ","))
		}
		for _, s := range rec.Services {
			if err := m.fab.CheckBound(ctx, s.NIC, s.ID, inode, rec.VNI); err != nil {
				return nil, fmt.Errorf("%w: claim %s: %w", ErrNotBound, rec.Key(), err)
			}
		}
		out = append(out, m.env(rec)...)
	}
	return out, nil
}

// missingServices are the claim's NICs without a service; none when it
// opted out of a VNI.
func (m *Manager) missingServices(rec *Record) []string {
	var out []string
	if rec.VNI == 0 {
		return nil
	}
	for _, n := range m.nicsOf(rec) {
		if !slices.ContainsFunc(rec.Services, func(s Service) bool { return s.NIC == n.Name }) {
			out = append(out, n.Name)
		}
	}
	return out
}

// Close closes the namespaces held.
func (m *Manager) Close() { m.ns.CloseAll() }

// fileNetns is a namespace held by an open file.
type fileNetns struct {
	f     *os.File
	inode uint32
}

func (n *fileNetns) Inode() uint32 { return n.inode }
func (n *fileNetns) Close() error  { return n.f.Close() }
func (n *fileNetns) Fd() uintptr   { return n.f.Fd() }

// OpenNetns opens the namespace at path (a bind mount under /var/run/netns
// or /proc/PID/ns/net) and reads its inode.
func OpenNetns(path string) (Netns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat network namespace %s: %w", path, err)
	}
	if st.Ino == 0 || st.Ino > 0xffffffff {
		_ = f.Close()
		return nil, fmt.Errorf("network namespace %s has inode %d, not a 32-bit namespace inode", path, st.Ino)
	}
	return &fileNetns{f: f, inode: uint32(st.Ino)}, nil
}

// SyncReport counts what Synchronize did.
type SyncReport struct {
	// Held: bound claims of running pods whose namespaces are held again.
	// Bound: prepared claims of running pods bound now (their sandbox
	// started while the agent or NRI was away). Failed: claims of running
	// pods that could not be bound, each logged; their containers' next
	// start is refused.
	Held, Bound, Failed int
}

// Synchronize is the runtime's list of running sandboxes, after the agent
// or the runtime (re)connected: the namespaces of bound claims are held
// again, and a prepared claim whose pod runs but whose services do not
// admit its namespace (its sandbox started while nothing could bind it) is
// bound now.
func (m *Manager) Synchronize(ctx context.Context, sandboxes []Sandbox) SyncReport {
	byUID := map[string]Sandbox{}
	for _, sb := range sandboxes {
		byUID[sb.UID] = sb
	}
	var rep SyncReport
	for _, rec := range m.store.all() {
		if !rec.Prepared || rec.Unpreparing || len(rec.Services) == 0 {
			continue
		}
		sb, ok := byUID[rec.BoundPod]
		if !ok {
			for _, p := range rec.Pods {
				if sb, ok = byUID[p.UID]; ok {
					break
				}
			}
		}
		if !ok || sb.NetnsPath == "" {
			continue // no pod of the claim runs; or hostNetwork, refused at its containers
		}
		if m.holdAgain(rec, sb) {
			rep.Held++
			continue
		}
		if err := m.bindClaim(ctx, rec.UID, sb); err != nil {
			rep.Failed++
			m.log.Error("bind a running pod's claim after (re)connecting to the runtime", "claim", rec.Key(), "pod", sb.key(), "err", err)
			m.cfg.Events.Record(event.Pod(sb.Namespace, sb.Name, sb.UID), event.LateBindFailed,
				fmt.Sprintf("Binding ResourceClaim %s after the runtime's NRI connection came back failed: %v", rec.Key(), err))
			continue
		}
		rep.Bound++
		m.log.Warn("bound a running pod's claim late: its sandbox started while nothing could bind it; its containers started before are not checked",
			"claim", rec.Key(), "pod", sb.key())
	}
	return rep
}

// holdAgain holds the namespace of a claim bound to sb's pod, when every
// service admits it; it reports whether it did.
func (m *Manager) holdAgain(rec *Record, sb Sandbox) bool {
	if rec.BoundPod != sb.UID {
		return false
	}
	ns, err := m.cfg.OpenNetns(sb.NetnsPath)
	if err != nil {
		m.log.Warn("namespace of a bound claim's pod cannot be opened; its services stay", "claim", rec.Key(), "err", err)
		return false
	}
	if slices.ContainsFunc(rec.Services, func(s Service) bool { return s.Netns != ns.Inode() }) {
		_ = ns.Close()
		return false
	}
	m.ns.Keep(engine.ClaimHolder(rec.UID), ns)
	return true
}

type holdResult int

const (
	holdNothing holdResult = iota
	heldAgain
	unboundGone
)

// holdBound holds again, at start, the namespace a bound claim's services
// admit, opened by the path the runtime named it by: until then a pod's
// exit could free it while the services still admit its inode. A
// namespace that is gone (nothing at the path, or another namespace
// there) has no pod in it any more: the services go back to unbound. Any
// other failure to open it proves nothing and changes nothing.
func (m *Manager) holdBound(ctx context.Context, rec *Record) holdResult {
	var inodes []uint32
	for _, s := range rec.Services {
		if s.Netns != 0 && !slices.Contains(inodes, s.Netns) {
			inodes = append(inodes, s.Netns)
		}
	}
	if len(inodes) == 0 || rec.BoundNetns == "" {
		return holdNothing
	}
	ns, err := m.cfg.OpenNetns(rec.BoundNetns)
	switch {
	case err == nil && len(inodes) == 1 && inodes[0] == ns.Inode():
		m.ns.Keep(engine.ClaimHolder(rec.UID), ns)
		return heldAgain
	case err == nil:
		_ = ns.Close()
	case !errors.Is(err, fs.ErrNotExist):
		m.log.Warn("the namespace a bound claim's services admit cannot be opened; they stay bound", "claim", rec.Key(), "path", rec.BoundNetns, "err", err)
		return holdNothing
	}
	var errs []error
	for _, inode := range inodes {
		if err := m.unbindAll(ctx, rec, inode); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		m.log.Error("unbind the services of a claim whose namespace is gone", "claim", rec.Key(), "err", err)
		m.cfg.Events.Record(event.Node(m.cfg.Node), event.UnbindFailed,
			fmt.Sprintf("ResourceClaim %s: its services admit the network namespace %s, which is gone, and unbinding them failed: %v", rec.Key(), rec.BoundNetns, err))
		return holdNothing
	}
	m.log.Info("a bound claim's namespace is gone; its services are unbound again", "claim", rec.Key(), "path", rec.BoundNetns)
	return unboundGone
}

// forgetLost drops from every record the services the driver lost
// (engine.Listing.Lost: a driver reload, a reboot) before anything is
// made, so that a claim's check never destroys another's new service on a
// reused ID. A failed listing changes nothing.
func (m *Manager) forgetLost(ctx context.Context) error {
	driver, err := m.fab.ListAll(ctx)
	if err != nil {
		return err
	}
	for _, rec := range m.store.all() {
		vnis := rec.Options.VNIs(rec.VNI)
		gone := func(s Service) bool { return driver.Lost(s.NIC, s.ID, vnis) }
		if !slices.ContainsFunc(rec.Services, gone) {
			continue
		}
		unlock := m.claimLocks.Lock(rec.UID)
		rec.Services = slices.DeleteFunc(rec.Services, gone)
		err := m.store.put(rec)
		unlock()
		if err != nil {
			return fmt.Errorf("claim %s: forget the services the driver lost: %w", rec.Key(), err)
		}
		m.log.Info("the driver lost services of a claim; they are made again", "claim", rec.Key())
	}
	return nil
}

// ReconcileReport counts what Reconcile did.
type ReconcileReport struct {
	Kept, Recreated, Finished, Orphans int
	// Held: bound claims whose namespace is held again; Unbound: bound
	// claims whose namespace is gone, their services made unbound again.
	Held, Unbound int
}

// Reconcile brings the driver and the records together at start: an
// interrupted Unprepare is finished, a prepared claim's service the driver
// lost (a reboot) is made again, unbound, and its spec rewritten; a
// disabled service admitting nobody that no record names, with a VNI in
// [lo, hi], is a Prepare that crashed before recording it and is
// destroyed. Nothing else is touched: a failed read destroys nothing.
func (m *Manager) Reconcile(ctx context.Context, lo, hi uint16) (ReconcileReport, error) {
	var rep ReconcileReport
	if err := m.forgetLost(ctx); err != nil {
		return rep, err
	}
	for _, rec := range m.store.all() {
		unlock := m.claimLocks.Lock(rec.UID)
		switch {
		case rec.Unpreparing:
			if err := m.teardown(ctx, rec); err != nil {
				m.log.Warn("finish interrupted unprepare; the kubelet's next call retries", "claim", rec.Key(), "err", err)
			} else {
				rep.Finished++
			}
		default:
			before := len(rec.Services)
			created, err := m.ensureServices(ctx, rec)
			if err != nil {
				m.log.Error("re-create a prepared claim's services", "claim", rec.Key(), "err", err)
			}
			rep.Recreated += len(created)
			rep.Kept += before - len(created)
			// Services made again are unbound (Netns 0): the pod's next
			// sandbox binds them. The spec names their new IDs.
			if len(created) > 0 && rec.Prepared {
				if err := m.writeSpec(rec); err != nil {
					m.log.Error("rewrite a claim's CDI spec", "claim", rec.Key(), "err", err)
				}
				m.cfg.Status.enqueue(m.statusOf(rec)) // new service IDs; written once the queue runs
			}
			if err := m.store.put(rec); err != nil {
				m.log.Error("record claim", "claim", rec.Key(), "err", err)
			}
			switch m.holdBound(ctx, rec) {
			case heldAgain:
				rep.Held++
			case unboundGone:
				rep.Unbound++
			}
		}
		unlock()
	}
	owned := map[string]map[uint32]bool{}
	for _, rec := range m.store.all() {
		for _, s := range rec.Services {
			if owned[s.NIC] == nil {
				owned[s.NIC] = map[uint32]bool{}
			}
			owned[s.NIC][s.ID] = true
		}
	}
	for _, name := range m.fab.NICs() {
		svcs, err := m.fab.List(ctx, name)
		if err != nil {
			return rep, err
		}
		for _, s := range svcs {
			if owned[name][s.ID] || s.IsDefault() || s.System || s.Enabled || len(s.Members) != 0 || !s.RestrictedMembers {
				continue
			}
			if len(s.VNIs) == 0 || slices.ContainsFunc(s.VNIs, func(v uint16) bool { return v < lo || v > hi }) {
				continue
			}
			if err := m.fab.Destroy(ctx, name, s.ID); err != nil {
				m.log.Error("destroy an unrecorded unbound service", "nic", name, "id", s.ID, "err", err)
				continue
			}
			rep.Orphans++
			m.log.Info("destroyed an unbound service no claim records (a prepare that crashed)", "nic", name, "id", s.ID, "vnis", s.VNIs)
		}
	}
	// Pins of claims no longer recorded, or bound to no pod, hold
	// namespaces for nothing. Pods' pins are the device plugin's.
	if err := m.ns.Unpin(func(holder string) bool {
		uid, isClaim := strings.CutPrefix(holder, engine.ClaimHolder(""))
		rec, ok := m.store.get(uid)
		return !isClaim || ok && rec.BoundPod != ""
	}); err != nil {
		m.log.Warn("drop the pins of namespaces no claim's services admit", "err", err)
	}
	return rep, m.store.save()
}

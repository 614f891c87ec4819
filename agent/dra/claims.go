package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// SpecWriter writes the claims' CDI specs; *cdispec.Writer is one.
type SpecWriter interface {
	DeviceName(key string) string
	Write(key string, edits cdispec.Edits) error
	Remove(key string) error
}

// NICDevice is a NIC the claims may be allocated; the engine drives its
// driver.
type NICDevice struct {
	Name    string // "cxi0", also the device name in the ResourceSlice
	DevPath string // host path of /dev/cxiN
	Netdev  string // the NIC's hsn netdev, "hsn0"; "" if it has none
}

// ManagerConfig is what a Manager is made of.
type ManagerConfig struct {
	Driver string
	Node   string
	// Engine is the agent's one bind engine: every claim's lease,
	// services, namespace hold and record go through it, as the device
	// plugin's pods do.
	Engine *engine.Engine
	NICs   []NICDevice
	// PodMeta returns the labels and annotations of a pod a claim is
	// reserved for, when known without asking anyone; nil, or false,
	// leases without sharing. A Job's claims on the node share one
	// controller call through it (engine.ShareKey).
	PodMeta func(namespace, name, uid string) (labels, annotations map[string]string, ok bool)
	// GroupClaim returns the PodGroup claim of the fabric's VNI device
	// that a claim's pod holds (APIGroupClaims.Of), nil when it holds
	// none; skip is the claim being prepared. A claim whose configuration
	// leaves its VNI to the job takes that claim's VNI, on every node.
	// nil: PodGroup claims are not served, and a claim of the VNI device
	// is refused.
	GroupClaim func(ctx context.Context, pod PodRef, skip string) (*resourceapi.ResourceClaim, error)
	CDI        SpecWriter
	// Jobs is what a claim may ask for its services (the configuration's
	// jobOptions, as it is now); nil, or a nil policy: the defaults.
	Jobs func() *jobpolicy.Policy
	// HSN is the hsn interfaces a bound claim's pod gets on its NICs, as
	// configured now; nil, or a nil policy: none.
	HSN     func() *engine.HSNPolicy
	Logger  *slog.Logger
	Metrics *Metrics // nil: not measured
	// OpenNetns opens a namespace by the path the runtime names it by.
	OpenNetns func(path string) (Netns, error)
	// Events tell the pods and the node what only the log would know;
	// nil: none.
	Events Events
	// Status writes each prepared claim's devices into its status, off
	// the kubelet's path (informational: a failure is logged and counted,
	// never fails the claim); nil: not written.
	Status *StatusQueue
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

// Manager is DRA's side of a claim's life: it translates the kubelet's
// Prepare and Unprepare and the runtime's sandbox and container events
// into the engine's steps, and adds what only DRA has: the claim's
// devices, its CDI spec, its status, the pods it is reserved for. Its
// methods are safe for concurrent use: the steps of one claim are ordered
// by the engine's lock of the claim.
type Manager struct {
	cfg  ManagerConfig
	log  *slog.Logger
	nics map[string]NICDevice
	eng  *engine.Engine
	m    *Metrics
}

// NewManager returns the Manager of the claims the engine records.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	switch {
	case cfg.Engine == nil:
		return nil, errors.New("dra: ManagerConfig.Engine is required")
	case cfg.BindReady == nil:
		return nil, errors.New("dra: ManagerConfig.BindReady is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OpenNetns == nil {
		cfg.OpenNetns = OpenNetns
	}
	if cfg.Events == nil {
		cfg.Events = event.Nop{}
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, nics: map[string]NICDevice{}, eng: cfg.Engine, m: cfg.Metrics}
	for _, n := range cfg.NICs {
		m.nics[n.Name] = n
	}
	return m, nil
}

// Records returns a copy of every claim record.
func (m *Manager) Records() []Record { return m.eng.Holders(checkpoint.KindClaim) }

// cdiKey names a claim's CDI device: the claim UID, never reused.
func cdiKey(uid string) string { return "claim-" + uid }

// Prepare prepares a claim: the engine leases its VNI and makes an
// unbound service on each of its NICs, and the CDI spec is written. It is
// idempotent: a repeated call finds what was done and makes only what is
// missing (after a reboot, the services and the spec).
func (m *Manager) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (devs []kubeletplugin.Device, err error) {
	start := time.Now()
	defer func() { m.m.observe("prepare", start, err) }()
	if group, err := draclaim.IsGroupVNI(claim, m.cfg.Driver); err != nil || group {
		return nil, m.prepareGroup(claim, err)
	}
	uid := string(claim.UID)
	id := checkpoint.ClaimID(uid)
	if err := m.cfg.BindReady(); err != nil {
		return nil, fmt.Errorf("claim %s/%s: its services could not be bound when its pod starts: %w", claim.Namespace, claim.Name, err)
	}
	unlock := m.eng.Lock(id)
	defer unlock()

	rec, recorded := m.eng.Get(id)
	if recorded && rec.Unpreparing {
		// An Unprepare stopped half-way; the kubelet wants the claim again.
		if err := m.teardown(ctx, id); err != nil {
			return nil, fmt.Errorf("claim %s: finish the interrupted unprepare first: %w", rec.Key(), err)
		}
		recorded = false
	}
	fresh := !recorded
	if fresh {
		if rec, err = m.admit(ctx, claim); err != nil {
			return nil, err
		}
	} else if rec, err = m.eng.Update(id, func(r *Record) {
		// The claim may be reserved for more pods now: those are refused
		// at their sandbox, which must know them.
		r.Pods = podsOf(claim)
	}); err != nil {
		return nil, err
	}
	created, err := m.eng.Ensure(ctx, id, m.nicNames(rec), nil)
	if err == nil {
		err = m.writeSpec(id)
	}
	if err == nil {
		if rec, err = m.eng.Update(id, func(r *Record) { r.Prepared = true }); err == nil {
			err = m.eng.Save()
		}
	}
	if err != nil {
		m.eng.Rollback(ctx, id, created, fresh, func(Record) bool { return m.cfg.CDI.Remove(cdiKey(uid)) == nil })
		return nil, err
	}
	m.log.Info("prepared claim", "claim", rec.Key(), "uid", uid, "vni", rec.VNI, "scope", rec.Scope, "services", rec.Services)
	m.cfg.Status.enqueue(m.statusOf(rec))
	return m.devices(rec), nil
}

// admit reads a claim seen for the first time and has the engine lease
// its VNI for the first pod it is reserved for and record it, before any
// service exists.
func (m *Manager) admit(ctx context.Context, claim *resourceapi.ResourceClaim) (Record, error) {
	rec, err := m.newRecord(claim)
	if err != nil {
		return rec, err
	}
	if len(rec.Pods) == 0 {
		return rec, fmt.Errorf("claim %s is reserved for no pod: whose job it serves is unknown", rec.Key())
	}
	pod := rec.Pods[0]
	policy, err := m.vniPolicy(ctx, rec, pod)
	if err != nil {
		return rec, err
	}
	ref := controllerclient.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Policy: policy}
	return m.eng.Admit(ctx, rec, ref, m.shareKey(pod, policy))
}

// vniPolicy is the VNI scope the claim's services carry: its
// configuration's, or, where that leaves it to the job, the VNI of the
// PodGroup claim its pod holds, the same on every node of the group.
func (m *Manager) vniPolicy(ctx context.Context, rec Record, pod PodRef) (string, error) {
	policy := rec.Config.VNI
	if m.cfg.GroupClaim == nil || !draclaim.InheritsGroupVNI(policy) {
		return policy, nil
	}
	group, err := m.cfg.GroupClaim(ctx, pod, rec.Name)
	if err != nil {
		return "", fmt.Errorf("claim %s: the PodGroup claim of pod %s/%s: %w", rec.Key(), pod.Namespace, pod.Name, err)
	}
	if group == nil {
		return policy, nil
	}
	return draclaim.GroupPolicy(group), nil
}

// prepareGroup prepares a PodGroup's claim of the fabric's VNI device
// (package draclaim): nothing on the node holds it. Its VNI is leased by
// the NIC claims of the group's pods (vniPolicy), each node's hold with
// them, so that a node holds the group's VNI exactly while a pod of the
// group has services there. bad is IsGroupVNI's refusal of the claim.
func (m *Manager) prepareGroup(claim *resourceapi.ResourceClaim, bad error) error {
	switch {
	case bad != nil:
		return bad
	case m.cfg.GroupClaim == nil:
		return fmt.Errorf("claim %s/%s asks for the fabric's VNI device, and this agent serves no PodGroup claims (--dra-podgroup-claims; the chart's dra.podGroupClaims): its pods' NIC claims would not carry its VNI", claim.Namespace, claim.Name)
	}
	m.log.Info("prepared PodGroup claim", "claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID)
	return nil
}

// newRecord reads the claim: its devices of this driver, its pods and its
// configuration.
func (m *Manager) newRecord(claim *resourceapi.ResourceClaim) (Record, error) {
	rec := Record{Kind: checkpoint.KindClaim, UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name}
	if claim.Status.Allocation == nil {
		return rec, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != m.cfg.Driver {
			continue
		}
		if _, ok := m.nics[r.Device]; !ok {
			return rec, fmt.Errorf("claim %s: device %s/%s is not one of this node's", rec.Key(), r.Pool, r.Device)
		}
		res := Result{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			res.ShareID = string(*r.ShareID)
		}
		rec.Results = append(rec.Results, res)
	}
	rec.Pods = podsOf(claim)
	cfg, err := draclaim.ConfigOf(claim, m.cfg.Driver)
	if err != nil {
		return rec, err
	}
	rec.Config = checkpoint.ClaimConfig{VNI: cfg.VNI, EnvSuffix: cfg.EnvSuffix}
	// Checked before the lease: a refused claim holds nothing.
	if rec.Options, err = m.options(claim.Namespace, cfg.ServiceOptions); err != nil {
		return rec, fmt.Errorf("claim %s, %s serviceOptions: %w", rec.Key(), ConfigKind, err)
	}
	if err := m.checkPools(rec, claim.Status.Allocation.Devices.Results); err != nil {
		return rec, err
	}
	return rec, nil
}

// checkPools refuses a claim whose services take an LE or TLE pool of a
// NIC it shares with other claims, where its allocation did not count
// one: the scheduler, which cannot read the claim's options, would
// otherwise place more such services on a NIC than it has pools, and the
// last would fail here with the NIC's pools full. A NIC the claim has
// alone counts nothing: its pools are the claim's.
func (m *Manager) checkPools(rec Record, results []resourceapi.DeviceRequestAllocationResult) error {
	lePool, tlePool := m.eng.Pools(rec.Options)
	need := []struct {
		takes    bool
		capacity resourceapi.QualifiedName
		what     string
	}{{lePool, CapacityLEPools, "LEs"}, {tlePool, CapacityTLEPools, "TLEs"}}
	for _, r := range results {
		if r.Driver != m.cfg.Driver || r.ShareID == nil {
			continue
		}
		for _, n := range need {
			if q, ok := r.ConsumedCapacity[n.capacity]; n.takes && (!ok || q.Value() < 1) {
				return fmt.Errorf("claim %s: its services reserve %s (its %s serviceOptions, or the node's limits), so each takes one of %s's %s, and its request counts none: add capacity: {requests: {%s: \"1\"}} to request %q, so that the scheduler places it on a NIC with a pool free",
					rec.Key(), n.what, ConfigKind, r.Device, n.capacity, n.capacity, r.Request)
			}
		}
	}
	return nil
}

// podsOf are the pods claim is reserved for.
func podsOf(claim *resourceapi.ResourceClaim) []PodRef {
	var out []PodRef
	for _, p := range draclaim.ReservedPods(claim) {
		out = append(out, PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name})
	}
	return out
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

// nicNames are the claim's NICs, in allocation order, once each.
func (m *Manager) nicNames(rec Record) []string {
	var out []string
	for _, r := range rec.Results {
		if _, ok := m.nics[r.Device]; ok && !slices.Contains(out, r.Device) {
			out = append(out, r.Device)
		}
	}
	return out
}

// env is the claim's SLINGSHOT_* environment, and the variable that names
// the claim to the container guard (claimMarker).
func (m *Manager) env(rec Record) []string {
	return append(m.eng.Env(rec, m.nicNames(rec)), claimMarker(rec))
}

// claimMarkerPrefix starts the variable each claim's CDI spec sets in its
// containers, named by the claim's UID so that two claims never collide.
// The kubelet prepares a claim once for all the pods that share it, so
// the agent hears of the second pod only through its containers: the
// marker is how the container guard knows which claims a container
// carries.
const claimMarkerPrefix = "SLINGSHOT_CLAIM_"

func claimMarker(rec Record) string {
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

// writeSpec writes the CDI spec of claim id as recorded now: its device
// nodes and environment.
func (m *Manager) writeSpec(id string) error {
	rec, _ := m.eng.Get(id)
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
func (m *Manager) devices(rec Record) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(rec.Results))
	for i, r := range rec.Results {
		d := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device}
		if r.ShareID != "" {
			d.ShareID = ptr.To(types.UID(r.ShareID))
		}
		if i == 0 {
			d.CDIDeviceIDs = []string{m.cfg.CDI.DeviceName(cdiKey(rec.UID))}
		}
		out = append(out, d)
	}
	return out
}

// Unprepare undoes Prepare for claim uid: the engine destroys the
// services and releases the VNI, and the CDI spec is removed. A claim it
// does not know is not an error (the kubelet may ask twice). What cannot
// be undone yet (a service still busy, the controller unreachable) stays
// recorded, and the error asks the kubelet to call again.
func (m *Manager) Unprepare(ctx context.Context, uid string) (err error) {
	start := time.Now()
	defer func() { m.m.observe("unprepare", start, err) }()
	id := checkpoint.ClaimID(uid)
	unlock := m.eng.Lock(id)
	defer unlock()
	rec, ok := m.eng.Get(id)
	if !ok {
		return nil
	}
	if !rec.Unpreparing {
		// Dated, so that the drain watch counts a stuck service from here.
		if _, err := m.eng.Update(id, func(r *Record) { t := time.Now().UTC(); r.Unpreparing, r.Exited = true, &t }); err != nil {
			return err
		}
		if err := m.eng.Save(); err != nil {
			return err
		}
	}
	if err := m.teardown(ctx, id); err != nil {
		return err
	}
	m.log.Info("unprepared claim", "claim", rec.Key(), "uid", uid, "vni", rec.VNI)
	return nil
}

// teardown has the engine tear claim id down, its CDI spec removed once
// its services are gone. The claim's lock is held.
func (m *Manager) teardown(ctx context.Context, id string) error {
	_, err := m.eng.Teardown(ctx, id, func(rec Record) error {
		if !m.eng.DropHSN(id) {
			return errors.New("its hsn interfaces or addresses are not released yet")
		}
		return m.cfg.CDI.Remove(cdiKey(rec.UID))
	})
	return err
}

// ErrNotBound is returned when a pod's services do not admit its current
// network namespace: its containers must not start.
var ErrNotBound = errors.New("CXI services not bound to the pod's network namespace")

// claimsOf are the UIDs of the records reserved for pod uid.
func (m *Manager) claimsOf(uid string) []string {
	var out []string
	for _, r := range m.Records() {
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
			ErrNotBound, sb.Key(), m.cfg.Driver)
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

// bindClaim binds claim uid to the sandbox's namespace and gives the pod
// the claim's hsn interfaces.
func (m *Manager) bindClaim(ctx context.Context, uid string, sb Sandbox) error {
	id := checkpoint.ClaimID(uid)
	unlock := m.eng.Lock(id)
	defer unlock()
	rec, ok := m.eng.Get(id)
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
		return fmt.Errorf("%w: pod %s: %w", ErrNotBound, sb.Key(), err)
	}
	inode := ns.Inode()
	// A sandbox made again: the claim's hsn interfaces leave the old
	// namespace, still held, before the engine lets it go.
	m.eng.LeaveOldNamespace(id, ns)
	replaced, err := m.eng.Bind(ctx, id, ns, func(r *Record) { r.BoundPod, r.BoundNetns = sb.UID, sb.NetnsPath })
	if err != nil {
		return fmt.Errorf("%w: claim %s: %w", ErrNotBound, rec.Key(), err)
	}
	if replaced {
		// The spec names the new services' IDs.
		if err := m.writeSpec(id); err != nil {
			return fmt.Errorf("%w: %w", ErrNotBound, errors.Join(err, m.eng.Unbind(ctx, id, inode)))
		}
	}
	if err := m.ensureHSN(ctx, id, sb); err != nil {
		// The services admit the namespace, which lacks what the claim
		// promises: unbound, the container is refused and the sandbox
		// retried.
		return fmt.Errorf("%w: %w", ErrNotBound, errors.Join(err, m.eng.Unbind(ctx, id, inode)))
	}
	now, _ := m.eng.Get(id)
	if replaced || !slices.Equal(now.HSNLinks(), rec.HSNLinks()) {
		m.cfg.Status.enqueue(m.statusOf(now))
	}
	m.log.Info("bound claim", "claim", rec.Key(), "pod", sb.Key(), "netns", inode, "vni", rec.VNI, "replaced", replaced)
	return nil
}

// ensureHSN has the engine give the bound pod the claim's hsn interfaces,
// where the configuration asks for them: one on the netdev of the
// claim's first NIC that has one, or on each with allNICs. They are
// numbered after the interfaces the pod's other claims have: each claim's
// names stay its own, whichever binds first.
func (m *Manager) ensureHSN(ctx context.Context, id string, sb Sandbox) error {
	var pol *engine.HSNPolicy
	if m.cfg.HSN != nil {
		pol = m.cfg.HSN()
	}
	if pol == nil {
		return nil
	}
	rec, _ := m.eng.Get(id)
	first := 0
	for _, other := range m.Records() {
		if other.ID() != id && other.ReservedFor(sb.UID) {
			first += len(other.HSNLinks())
		}
	}
	var rails []engine.Rail
	for _, name := range m.nicNames(rec) {
		rails = append(rails, engine.Rail{NIC: name, Netdev: m.nics[name].Netdev})
	}
	return m.eng.EnsureHSN(ctx, id, m.eng.Namespaces().Get(id), engine.HSNRequest{Policy: *pol, Rails: rails, Pod: sb.Key(), FirstIndex: first})
}

// checkSuffixes refuses a pod two of whose claims would set the same
// SLINGSHOT_* names: each claim's CDI spec sets its own values, and the
// runtime would refuse the clash with a message that names neither the
// claims nor the fix.
func (m *Manager) checkSuffixes(uids []string, sb Sandbox) error {
	bySuffix := map[string]string{}
	for _, uid := range uids {
		rec, ok := m.eng.Get(checkpoint.ClaimID(uid))
		if !ok {
			continue
		}
		if other, clash := bySuffix[rec.Config.EnvSuffix]; clash {
			names := "SLINGSHOT_DEVICES, SLINGSHOT_VNIS, ..."
			if rec.Config.EnvSuffix != "" {
				names = "SLINGSHOT_DEVICES_" + rec.Config.EnvSuffix + ", ..."
			}
			return fmt.Errorf("%w: pod %s has ResourceClaims %s and %s of %s that both set %s; give each claim but one its own envSuffix in its CXIClaimConfig (apiVersion %s, kind %s), e.g. envSuffix: STORAGE",
				ErrNotBound, sb.Key(), other, rec.Key(), m.cfg.Driver, names, ConfigAPIVersion, ConfigKind)
		}
		bySuffix[rec.Config.EnvSuffix] = rec.Key()
	}
	return nil
}

// sharedClaimMessage says why a second pod of a claim is refused, and
// what to do, for the person reading the pod's events.
func sharedClaimMessage(rec Record, sb Sandbox) string {
	holder := "with UID " + rec.BoundPod
	if i := slices.IndexFunc(rec.Pods, func(p PodRef) bool { return p.UID == rec.BoundPod }); i >= 0 {
		holder = rec.Pods[i].Namespace + "/" + rec.Pods[i].Name
	}
	return fmt.Sprintf("ResourceClaim %s is in use by pod %s on this node: a claim's CXI services admit one pod's network namespace, so pod %s cannot share it; give each pod its own claim with a ResourceClaimTemplate (spec.resourceClaims[].resourceClaimTemplateName), whose claims of one Job share its VNI",
		rec.Key(), holder, sb.Key())
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
		return nil, fmt.Errorf("%w: pod %s has no network namespace of its own", ErrNotBound, sb.Key())
	}
	ns, err := m.cfg.OpenNetns(sb.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("%w: pod %s: %w", ErrNotBound, sb.Key(), err)
	}
	inode := ns.Inode()
	_ = ns.Close()
	var out []string
	for _, uid := range uids {
		rec, ok := m.eng.Get(checkpoint.ClaimID(uid))
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: the container carries claim %s, which this node has not prepared", ErrNotBound, uid)
		case rec.BoundPod != "" && rec.BoundPod != sb.UID:
			return nil, fmt.Errorf("%w: %w", ErrNotBound, sharedClaimError(sharedClaimMessage(rec, sb)))
		case rec.BoundPod != sb.UID:
			return nil, fmt.Errorf("%w: claim %s was never bound to pod %s", ErrNotBound, rec.Key(), sb.Key())
		}
		if err := m.eng.Check(ctx, rec.ID(), m.nicNames(rec), inode); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotBound, err)
		}
		out = append(out, m.env(rec)...)
	}
	return out, nil
}

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
// or the runtime (re)connected: each prepared claim of a running pod is
// bound to the pod's namespace as it is now. A claim bound to it already
// is held again; one whose sandbox started while nothing could bind it, or
// was made again meanwhile, is bound now (engine.Bind replaces what
// admits another namespace).
func (m *Manager) Synchronize(ctx context.Context, sandboxes []Sandbox) SyncReport {
	byUID := map[string]Sandbox{}
	for _, sb := range sandboxes {
		byUID[sb.UID] = sb
	}
	var rep SyncReport
	for _, rec := range m.Records() {
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
		wasBound := rec.BoundPod == sb.UID && rec.Netns != 0
		if err := m.bindClaim(ctx, rec.UID, sb); err != nil {
			rep.Failed++
			m.log.Error("bind a running pod's claim after (re)connecting to the runtime", "claim", rec.Key(), "pod", sb.Key(), "err", err)
			m.cfg.Events.Record(event.Pod(sb.Namespace, sb.Name, sb.UID), event.LateBindFailed,
				fmt.Sprintf("Binding ResourceClaim %s after the runtime's NRI connection came back failed: %v", rec.Key(), err))
			continue
		}
		if now, _ := m.eng.Get(rec.ID()); wasBound && now.Netns == rec.Netns {
			rep.Held++
			continue
		}
		rep.Bound++
		m.log.Warn("bound a running pod's claim late: its sandbox started while nothing could bind it; its containers started before are not checked",
			"claim", rec.Key(), "pod", sb.Key())
	}
	return rep
}

// ReconcileReport counts what Reconcile did.
type ReconcileReport struct {
	Kept, Recreated, Finished, Orphans int
	// Held: bound claims whose namespace is held again; Unbound: bound
	// claims whose namespace could not be verified, their services made
	// unbound again.
	Held, Unbound int
}

// Reconcile brings the driver and the records together at start, through
// the engine: an interrupted Unprepare is finished; a prepared claim's
// services are revived (engine.Revive: those the driver lost made again,
// the namespace of a bound claim held again where it is verified, by the
// path the runtime named it by or by its pin, or the services unbound
// where it is not) and its spec rewritten where they changed; services no
// record names are the engine's orphans. A failed read destroys nothing.
func (m *Manager) Reconcile(ctx context.Context, lo, hi uint16) (ReconcileReport, error) {
	var rep ReconcileReport
	lost, err := m.eng.ForgetLost(ctx)
	if err != nil {
		return rep, err
	}
	recs := m.Records()
	lost.Sort(recs)
	for _, rec := range recs {
		unlock := m.eng.Lock(rec.ID())
		if rec.Unpreparing {
			if err := m.teardown(ctx, rec.ID()); err != nil {
				m.log.Warn("finish interrupted unprepare; the kubelet's next call retries", "claim", rec.Key(), "err", err)
			} else {
				rep.Finished++
			}
		} else {
			m.revive(ctx, rec, &rep)
		}
		unlock()
	}
	m.eng.ReconcileHSN()
	orphans, err := m.eng.Orphans(ctx, engine.OrphanRules{Lo: lo, Hi: hi}, func(h Record) bool { return h.Kind == checkpoint.KindClaim })
	rep.Orphans = orphans.Destroyed
	m.eng.DropStalePins()
	return rep, err
}

// revive has the engine bring a prepared claim's services back at start.
// The claim's lock is held.
func (m *Manager) revive(ctx context.Context, rec Record, rep *ReconcileReport) {
	open := func() (engine.Handle, error) {
		if rec.BoundNetns == "" {
			return nil, fmt.Errorf("claim %s names no namespace path", rec.Key())
		}
		return m.cfg.OpenNetns(rec.BoundNetns)
	}
	how, created, err := m.eng.Revive(ctx, rec.ID(), m.nicNames(rec), open, nil)
	if err != nil {
		m.log.Error("revive a claim's services", "claim", rec.Key(), "err", err)
	}
	rep.Recreated += len(created)
	rep.Kept += len(rec.Services)
	switch how {
	case engine.Held:
		rep.Held++
	case engine.Unheld:
		rep.Unbound++
	}
	// Services made again are unbound: the pod's next sandbox, or the
	// runtime's list at connect (Synchronize), binds them. The spec names
	// their new IDs.
	if (len(created) > 0 || how == engine.Unheld) && rec.Prepared {
		if err := m.writeSpec(rec.ID()); err != nil {
			m.log.Error("rewrite a claim's CDI spec", "claim", rec.Key(), "err", err)
		}
		now, _ := m.eng.Get(rec.ID())
		m.cfg.Status.enqueue(m.statusOf(now)) // new service IDs; written once the queue runs
	}
}

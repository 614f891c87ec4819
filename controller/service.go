package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// PodRef identifies a pod; UID may be empty where the caller does not know it.
type PodRef struct {
	Namespace string
	Name      string
	UID       string
}

// Resolution is what a Resolver finds for a pod.
type Resolution struct {
	// Pod is the pod itself, its UID filled in.
	Pod store.Owner
	// Owner is the topmost controlling owner of a listed kind, nil if none.
	Owner *store.Owner
	// Policy is the AnnotationVNI of the pod, else of its owners.
	Policy Policy
	// NetworkRequest is the pod's AnnotationNetwork, unparsed; "" if none.
	NetworkRequest string
}

// Resolver finds a pod's owner and whether owners still exist. Package
// owner implements it over the Kubernetes API.
type Resolver interface {
	// ResolvePod returns an error wrapping ErrNotFound when the pod does
	// not exist.
	ResolvePod(ctx context.Context, pod PodRef) (Resolution, error)
	// OwnerExists reports whether the object exists (with o.UID when set).
	OwnerExists(ctx context.Context, o store.Owner) (bool, error)
}

// NodeDirectory tells since when a Node object has been seen deleted.
type NodeDirectory interface {
	NodeGone(name string) (since time.Time, gone bool)
}

// ScopeNone is the scope of a pod that opted out of a VNI.
const ScopeNone store.Scope = "none"

// Lease is a VNI lease as the API reports it.
type Lease struct {
	Key       string
	VNI       uint16
	Scope     store.Scope
	Owner     store.Owner
	Nodes     []string
	OwnerGone bool
	Created   time.Time
	// FromNodeSlice says the pod-scoped VNI is to be taken from the node's
	// slice of the pod VNI pool; VNI is 0 then.
	FromNodeSlice bool
	// NetworkRequest is the pod's AnnotationNetwork, unparsed, in answers
	// to AcquireJobVNI; it is read anew for every answer and never stored.
	NetworkRequest string
	// Collectives is the job's hardware-collectives reservation, in
	// answers to AcquireJobVNI of a job lease while they are enabled
	// (Config.Collectives); nil otherwise.
	Collectives *Collectives
}

// Allocator is the controller core: it leases job VNIs and node slices,
// keeps them unique, quarantines what is freed and reclaims what dead
// nodes held.
type Allocator struct {
	cfg   Config
	st    store.Store
	res   Resolver
	nodes NodeDirectory
	log   *slog.Logger
	m     *metrics
	coll  *collectives // nil without Config.Collectives
	kick  chan struct{}
	// loaded is closed once the first load completes.
	loaded     chan struct{}
	loadedOnce sync.Once

	mu         sync.Mutex
	ready      bool
	alloc      *vnialloc.Allocator
	leases     map[string]*lease
	perNS      map[string]int // leases of each owner namespace, for the cap
	quarantine map[uint16]store.Quarantine
	pools      map[string]*slices.Table
	poolOrder  []string
	meta       map[string]store.Meta
	cursorSeen uint16
	cur        *batch
	lastSeen   map[string]time.Time
	// inUse is each node's last report of the VNIs it uses, and
	// acquired when each node last acquired each lease it holds; both
	// live in memory only: a restarted controller starts their clocks
	// anew, which only delays a drop.
	inUse    map[string]vniReport
	acquired map[hold]time.Time
}

// vniReport is what a node last said it uses.
type vniReport struct {
	vnis map[uint16]bool
	at   time.Time
}

// hold is one node's hold on one lease.
type hold struct{ key, node string }

type lease struct {
	rec     store.Lease
	pending *batch
	// made is the batch that creates the lease, nil for a loaded one.
	made *batch
}

// New returns a Allocator over st. res may be nil (embedded mode: every pod
// is pod-scoped, claims are refused) and so may nodes. It returns the
// configuration's validation errors.
func New(st store.Store, res Resolver, nodes NodeDirectory, cfg Config) (*Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Allocator{cfg: cfg, st: st, res: res, nodes: nodes, log: cfg.Logger, kick: make(chan struct{}, 1), loaded: make(chan struct{}),
		inUse: map[string]vniReport{}, acquired: map[hold]time.Time{}}
	s.m = newMetrics(s, cfg.Registerer)
	if cfg.Collectives != nil {
		s.coll = newCollectives(*cfg.Collectives, cfg.Logger, s.m)
	}
	return s, nil
}

// Run loads the state, opens the gate, then commits batches and sweeps
// until ctx ends (it returns nil then). A failed commit closes the gate
// and reloads. It returns an error when the state cannot be loaded,
// wrapping ErrConfigConflict when the configuration contradicts it.
func (s *Allocator) Run(ctx context.Context) error {
	load := backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2, Attempts: 8}
	for {
		err := load.Do(ctx, func(ctx context.Context) error {
			err := s.load(ctx)
			if errors.Is(err, ErrConfigConflict) {
				return backoff.Permanent(err)
			}
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("load state: %w", err)
		}
		err = s.serve(ctx)
		if ctx.Err() != nil {
			s.closeGate(fmt.Errorf("%w: shutting down", ErrUnavailable))
			return nil
		}
		s.log.Error("commit failed; reloading state", "err", err)
	}
}

// Ready reports whether the gate is open.
func (s *Allocator) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// Loaded returns a channel closed once the state has first been loaded.
func (s *Allocator) Loaded() <-chan struct{} { return s.loaded }

// load reads the stored state, checks it against the configuration, commits
// what start-up changes and opens the gate.
func (s *Allocator) load(ctx context.Context) error {
	start := s.cfg.Now()
	state, err := s.st.Load(ctx)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	alloc, err := vnialloc.New(s.cfg.VNIRange, s.cfg.Quarantine, s.cfg.PodVNIRange)
	if err != nil {
		return err
	}
	mw := newMetaWrites(state.Meta)
	leases, perNS, conflicts := takeLeases(alloc, state.Leases)
	quarantine := restoreQuarantine(alloc, state.Quarantine, now, mw)
	if c, err := strconv.ParseUint(mw.meta["vni-cursor"].Value, 10, 16); err == nil {
		alloc.SetCursor(uint16(c))
	}
	mw.set("vni-range", s.cfg.VNIRange.String())

	pools, order, err := s.newPools()
	if err != nil {
		return err
	}
	conflicts = append(conflicts, poolConflicts(pools, state.Slices, mw.meta)...)
	if len(conflicts) > 0 {
		return errors.Join(conflicts...)
	}
	for _, sl := range state.Slices {
		if err := pools[sl.Pool].Load(sl, now, s.cfg.SliceTTL); err != nil {
			return fmt.Errorf("%w: %w", ErrConfigConflict, err)
		}
	}
	for _, name := range order {
		mw.set("pool/"+name, pools[name].Spec().String())
	}
	if err := s.st.Commit(ctx, mw.ops); err != nil {
		return fmt.Errorf("commit startup changes: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.alloc, s.leases, s.perNS, s.quarantine, s.pools, s.poolOrder, s.meta = alloc, leases, perNS, quarantine, pools, order, mw.meta
	s.cursorSeen = alloc.Cursor()
	s.cur = newBatch()
	s.lastSeen = map[string]time.Time{}
	s.ready = true
	s.tellClaimsLoadedLocked()
	s.loadedOnce.Do(func() { close(s.loaded) })
	if s.coll == nil {
		n := 0
		for _, l := range leases {
			if l.rec.HWCollJob != "" {
				n++
			}
		}
		if n > 0 {
			// Nothing here can release them: say so rather than leak
			// silently.
			s.log.Warn("leases hold hardware-collectives reservations, but collectives are off: the fabric manager keeps them until they are released there",
				"leases", n)
		}
	}
	s.log.Info("state loaded", "leases", len(leases), "quarantined", len(quarantine), "slices", len(state.Slices),
		"vni_range", s.cfg.VNIRange.String(), "took", s.cfg.Now().Sub(start))
	return nil
}

// metaWrites is the stored meta values by key and the store ops that
// bring the store to them.
type metaWrites struct {
	meta map[string]store.Meta
	ops  []store.Op
}

func newMetaWrites(stored []store.Meta) *metaWrites {
	w := &metaWrites{meta: map[string]store.Meta{}}
	for _, m := range stored {
		w.meta[m.Key] = m
	}
	return w
}

// set records value under key, writing it only where it changed or was
// never stored.
func (w *metaWrites) set(key, value string) {
	m := w.meta[key]
	if m.Value == value && m.Version != 0 {
		return
	}
	next := store.Meta{Key: key, Value: value, Version: m.Version + 1}
	w.ops = append(w.ops, store.Put(&next, m.Version))
	w.meta[key] = next
}

// takeLeases takes the stored leases' VNIs in alloc; a lease whose VNI the
// configured ranges no longer hold is a conflict.
func takeLeases(alloc *vnialloc.Allocator, stored []store.Lease) (map[string]*lease, map[string]int, []error) {
	leases := make(map[string]*lease, len(stored))
	perNS := map[string]int{}
	var conflicts []error
	for _, l := range stored {
		if err := alloc.Take(l.VNI); err != nil {
			conflicts = append(conflicts, fmt.Errorf("%w: lease %s of %s %s/%s holds vni %d: %w; the vni range cannot shrink over a live lease (widen --vni-range or --pod-vni-range, or wait for the job to end)",
				ErrConfigConflict, l.Key, l.Owner.Kind, l.Owner.Namespace, l.Owner.Name, l.VNI, err))
			continue
		}
		leases[l.Key] = &lease{rec: l}
		perNS[l.Owner.Namespace]++
	}
	return leases, perNS, conflicts
}

// restoreQuarantine puts the stored quarantine back into alloc, oldest
// first, and deletes in mw what is stale, outside the range or expired.
func restoreQuarantine(alloc *vnialloc.Allocator, stored []store.Quarantine, now time.Time, mw *metaWrites) map[uint16]store.Quarantine {
	quarantine := map[uint16]store.Quarantine{}
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].Released.Before(stored[j].Released) })
	for _, q := range stored {
		if !alloc.Quarantined(q.VNI) && alloc.Restore(q.VNI, q.Released) == nil && alloc.Quarantined(q.VNI) {
			quarantine[q.VNI] = q
			continue
		}
		// Outside the range now, or stale: not a live lease, drop it.
		rec := q
		mw.ops = append(mw.ops, store.Delete(&rec, q.Version))
	}
	for _, v := range alloc.Expire(now) {
		rec := quarantine[v]
		mw.ops = append(mw.ops, store.Delete(&rec, rec.Version))
		delete(quarantine, v)
	}
	return quarantine
}

// newPools makes the configured pools' tables, and their names in order.
func (s *Allocator) newPools() (map[string]*slices.Table, []string, error) {
	pools := map[string]*slices.Table{}
	var order []string
	for _, spec := range s.cfg.pools() {
		t, err := slices.NewTable(spec)
		if err != nil {
			return nil, nil, err
		}
		pools[spec.Name] = t
		order = append(order, spec.Name)
	}
	return pools, order, nil
}

// poolConflicts are the pools removed or changed while slices of theirs
// are leased.
func poolConflicts(pools map[string]*slices.Table, leased []store.Slice, meta map[string]store.Meta) []error {
	leasedIn := map[string]int{}
	for _, sl := range leased {
		leasedIn[sl.Pool]++
	}
	var conflicts []error
	for name, n := range leasedIn {
		t := pools[name]
		stored := meta["pool/"+name].Value
		switch {
		case t == nil:
			conflicts = append(conflicts, fmt.Errorf("%w: pool %s (%s) was removed while %d of its slices are leased", ErrConfigConflict, name, stored, n))
		case stored != "" && stored != t.Spec().String():
			conflicts = append(conflicts, fmt.Errorf("%w: pool %s changed from %s to %s while %d of its slices are leased; a range in use cannot change",
				ErrConfigConflict, name, stored, t.Spec().String(), n))
		}
	}
	return conflicts
}

// closeGate fails every pending batch with err and closes the gate.
func (s *Allocator) closeGate(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = false
	if s.cur != nil {
		s.cur.finish(err)
		s.cur = nil
	}
}

// gate returns ErrUnavailable unless the state is loaded; call with s.mu held.
func (s *Allocator) gate() error {
	if !s.ready {
		return fmt.Errorf("%w: state is loading", ErrUnavailable)
	}
	return nil
}

func (s *Allocator) now() time.Time { return s.cfg.Now() }

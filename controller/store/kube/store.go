package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// ErrFenced is wrapped (with store.ErrConflict) by Commit when another
// writer has loaded the store since this one did: this writer no longer
// leads and must not write.
var ErrFenced = errors.New("store fenced by another writer")

// ErrNeedsLoad is wrapped by Commit after a commit failed past its commit
// point: the store's cache may be stale until Load runs again.
var ErrNeedsLoad = errors.New("store must be loaded again after a failed commit")

// AnnotationBatch names the batch (epoch.seq) that last wrote an object;
// Load uses it to tell whether a journaled write reached its object.
const AnnotationBatch = "slingshot.hpe.com/batch"

// Options configure a Store.
type Options struct {
	// Namespace holds the store's objects: the controller's namespace.
	Namespace string
	// Name is the head object's name; default "slingshot-controller".
	Name string
	// Identity names this writer in the head (the pod name); default
	// "unknown".
	Identity string
	// Parallel bounds the writes of one batch in flight; default 32.
	Parallel int
	// RequestTimeout bounds each API call; default 10 s.
	RequestTimeout time.Duration
	// SliceRange, if set, renders a slice's range for spec.range (shown
	// by kubectl); it does not affect the store's behaviour.
	SliceRange func(pool string, index int) string
	// CatchUp bounds how long a Load waits for the follower (Follow) to
	// reach the revisions the head names before it lists instead; default
	// 2 s.
	CatchUp time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Batches whose journal exceeds inlineLimit bytes go to part objects of
// at most partLimit bytes each, well below the API server's 1.5 MiB
// request limit.
const (
	inlineLimit = 256 << 10
	partLimit   = 512 << 10
)

// Store is a [store.Store] on the Kubernetes API; see the package doc.
type Store struct {
	rc   rest.Interface
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	loaded   bool
	closed   bool
	poisoned error
	headRV   string
	head     journalSpec
	entries  map[string]entry
	vnis     map[uint16]string

	// mirror is Follow's copy of the objects; it has its own lock.
	mirror *mirror
}

var _ store.Store = (*Store)(nil)

// New returns a Store that reaches the API server through cfg. It returns
// an error for invalid options. A config without a rate limit (QPS 0) gets
// 500 queries per second with bursts of 1000, not client-go's 5.
func New(cfg *rest.Config, opts Options) (*Store, error) {
	if opts.Name == "" {
		opts.Name = "slingshot-controller"
	}
	if opts.Identity == "" {
		opts.Identity = "unknown"
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 32
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.CatchUp <= 0 {
		opts.CatchUp = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if errs := validation.IsDNS1123Label(opts.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("store namespace %q: %s", opts.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(opts.Name); len(errs) > 0 || len(opts.Name) > 200 {
		return nil, fmt.Errorf("store name %q: not a DNS subdomain of at most 200 characters", opts.Name)
	}
	rc, err := newRESTClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Store{rc: rc, opts: opts, log: opts.Logger, mirror: newMirror()}, nil
}

// Close marks the store closed; it holds no connection of its own.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *Store) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	return f(ctx)
}

// Load implements [store.Store]: it fences out any other writer, rolls the
// last journaled batch forward and returns every record. It returns an
// error wrapping ErrBadObject when an object cannot be decoded, or
// ErrDuplicateVNI when two leases hold one VNI.
func (s *Store) Load(ctx context.Context) (*store.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("load: store closed")
	}
	st, err := s.loadLocked(ctx)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return st, nil
}

// listing is every object of the store by resource and name.
type listing struct {
	leases      map[string]*leaseObject
	slices      map[string]*sliceObject
	quarantines map[string]*quarantineObject
	journals    map[string]*journalObject
}

func (s *Store) loadLocked(ctx context.Context) (*store.State, error) {
	s.loaded = false
	t0 := time.Now()
	prev, err := s.fence(ctx)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	var ls listStats
	l, at, err := s.snapshot(ctx, prev, &ls)
	if err != nil {
		return nil, err
	}
	mirrored := slices.Sorted(maps.Keys(at))
	t2 := time.Now()
	ops, err := s.pendingOps(prev, l)
	if err != nil {
		return nil, err
	}
	read, err := s.refresh(ctx, prev.Batch, ops, l, at)
	if err != nil {
		return nil, err
	}
	s.notePending(ops, l, at, read)
	if err := s.rollForward(ctx, prev.Batch, ops, l); err != nil {
		return nil, err
	}
	if s.head.PendingCount > 0 {
		if err := s.clearPending(ctx); err != nil {
			return nil, err
		}
	}
	s.collectParts(ctx, l)
	t3 := time.Now()
	st, err := s.rebuild(l)
	if err != nil {
		return nil, err
	}
	s.loaded, s.poisoned = true, nil
	// Where a load's time goes, for whoever tunes failover.
	s.log.Info("store loaded", "took", time.Since(t0), "fence", t1.Sub(t0), "snapshot", t2.Sub(t1), "mirrored", mirrored,
		"list_pages", ls.pages, "list_bytes", ls.bytes, "list_fetch_sum", ls.fetch, "list_fetch_slowest", ls.slowest,
		"list_decode_sum", ls.decode, "roll_forward", t3.Sub(t2), "rebuild", time.Since(t3),
		"leases", len(st.Leases), "slices", len(st.Slices), "quarantined", len(st.Quarantine))
	return st, nil
}

// snapshot returns every object of the store after the fence: each record
// resource from the mirror where Follow's watch of it has reached the
// revision prev names for it, else listed; the journal always listed (a
// few objects). It returns the resources taken from the mirror, with the
// mirror's revision of each.
//
// The mirror of a resource at revision rv holds every write to it up to
// rv (a watch delivers one resource's events in order). prev.Applied
// names a revision at or after every write of the batches before prev's
// pending one, and no writer starts another batch once the head is
// fenced: so the snapshot holds every committed batch but the last,
// which pendingOps and refresh read afresh. Writes after the fence are
// the fenced writer's last batch, as with a list.
func (s *Store) snapshot(ctx context.Context, prev journalSpec, ls *listStats) (*listing, map[resource]uint64, error) {
	want := map[resource]uint64{}
	for _, r := range followed {
		if rv, err := strconv.ParseUint(prev.Applied[string(r)], 10, 64); err == nil && rv > 0 {
			want[r] = rv
		}
	}
	have, at := s.mirror.catchUp(ctx, want, s.opts.CatchUp)
	l := &listing{leases: map[string]*leaseObject{}, slices: map[string]*sliceObject{},
		quarantines: map[string]*quarantineObject{}, journals: map[string]*journalObject{}}
	for r, objs := range have {
		for name, o := range objs {
			l.set(r, name, o)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	if have[resLease] == nil {
		g.Go(func() error {
			_, err := listAll(gctx, s, resLease, ls, func(o *leaseObject) { mu.Lock(); l.leases[o.Name] = o; mu.Unlock() })
			return err
		})
	}
	if have[resSlice] == nil {
		g.Go(func() error {
			_, err := listAll(gctx, s, resSlice, ls, func(o *sliceObject) { mu.Lock(); l.slices[o.Name] = o; mu.Unlock() })
			return err
		})
	}
	if have[resQuarantine] == nil {
		g.Go(func() error {
			_, err := listAll(gctx, s, resQuarantine, ls, func(o *quarantineObject) { mu.Lock(); l.quarantines[o.Name] = o; mu.Unlock() })
			return err
		})
	}
	g.Go(func() error {
		_, err := listAll(gctx, s, resJournal, ls, func(o *journalObject) { mu.Lock(); l.journals[o.Name] = o; mu.Unlock() })
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return l, at, nil
}

// refresh reads afresh, into l, the objects that batch id's ops write and
// that l took from the mirror (at names those resources) without showing
// the op done: the head names no revision for the last batch, so the
// mirror may not have its writes yet. A put is done where the object
// carries the batch; a delete where the mirror lacks the object, which it
// held before the batch (its creation is older than the revision waited
// for).
// It returns the ops whose object it read.
func (s *Store) refresh(ctx context.Context, id string, ops []walOp, l *listing, at map[resource]uint64) (map[int]bool, error) {
	read := map[int]bool{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for i, op := range ops {
		if _, ok := at[op.Res]; !ok {
			continue
		}
		cur, _, batch := l.current(op.Res, op.Name)
		if rec := op.record(); (rec == nil && cur == 0) || (rec != nil && cur != 0 && batch == id) {
			continue
		}
		read[i] = true
		g.Go(func() error {
			var raw json.RawMessage
			err := s.get(gctx, op.Res, op.Name, &raw)
			var obj any
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("read %s %s: %w", op.Res, op.Name, err)
			default:
				if obj, _, err = decodeObject(op.Res, raw); err != nil {
					return fmt.Errorf("read %s %s: %w", op.Res, op.Name, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			l.set(op.Res, op.Name, obj)
			return nil
		})
	}
	return read, g.Wait()
}

// notePending takes into s.head.Applied what the last batch wrote before
// this load, as l shows it: its writer never recorded it, having been
// fenced or crashed. A delete it made left no revision behind: where the
// mirror (at) saw it (the op's object was not read afresh), the mirror's
// revision covers it; else its resource becomes unknown until this writer
// next writes it.
func (s *Store) notePending(ops []walOp, l *listing, at map[resource]uint64, read map[int]bool) {
	for i, op := range ops {
		_, rv, _ := l.current(op.Res, op.Name)
		switch {
		case rv != "":
			s.noteApplied(op.Res, rv)
		case op.From == 0:
		case at[op.Res] != 0 && !read[i]:
			s.noteApplied(op.Res, strconv.FormatUint(at[op.Res], 10))
		default:
			s.head.Applied = maps.Clone(s.head.Applied)
			delete(s.head.Applied, string(op.Res))
		}
	}
}

// noteApplied raises s.head.Applied[r] to rv, the revision of a write to
// r; the next head write carries it. An empty or unparsable rv makes r
// unknown.
func (s *Store) noteApplied(r resource, rv string) {
	a := maps.Clone(s.head.Applied)
	if a == nil {
		a = map[string]string{}
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	cur, cerr := strconv.ParseUint(a[string(r)], 10, 64)
	switch {
	case err != nil || n == 0:
		delete(a, string(r))
	case cerr != nil || n > cur:
		a[string(r)] = rv
	}
	s.head.Applied = a
}

// fence bumps the head's epoch compare-and-swap and returns the head as
// it was: its pending batch is the last one any writer may have started.
func (s *Store) fence(ctx context.Context) (journalSpec, error) {
	var prev journalSpec
	retry := backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.5, Attempts: 8}
	err := retry.Do(ctx, func(ctx context.Context) error {
		var old journalObject
		err := s.get(ctx, resJournal, s.opts.Name, &old)
		switch {
		case apierrors.IsNotFound(err):
			old = journalObject{}
		case errors.Is(err, ErrBadObject):
			return backoff.Permanent(fmt.Errorf("head %s: %w", s.opts.Name, err))
		case err != nil:
			return fmt.Errorf("get head %s: %w", s.opts.Name, err)
		}
		// The pending batch stays in the head until a new batch replaces
		// it: should this load fail before rolling it forward, the next
		// one still finds it.
		next := journalObject{TypeMeta: typeMeta("StoreJournal"), ObjectMeta: objectMeta(s.opts.Name, s.opts.Namespace, 1, old.ResourceVersion),
			Spec: old.Spec}
		next.Spec.Holder, next.Spec.Epoch = s.opts.Identity, old.Spec.Epoch+1
		written, err := s.put(ctx, resJournal, s.opts.Name, &next, old.ResourceVersion == "")
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("fence head %s: %w", s.opts.Name, err)
		}
		if err != nil {
			return fmt.Errorf("fence head %s: %w", s.opts.Name, err)
		}
		prev = old.Spec
		s.head, s.headRV = next.Spec, written
		return nil
	})
	if err != nil {
		return journalSpec{}, err
	}
	s.log.Info("store fenced", "head", s.opts.Name, "epoch", s.head.Epoch, "previous_holder", prev.Holder)
	return prev, nil
}

// current returns the store version, resourceVersion and batch of the
// listed object r/name; version 0 when it is absent.
func (l *listing) current(r resource, name string) (uint64, string, string) {
	var m *metav1.ObjectMeta
	switch r {
	case resLease:
		if o := l.leases[name]; o != nil {
			m = &o.ObjectMeta
		}
	case resSlice:
		if o := l.slices[name]; o != nil {
			m = &o.ObjectMeta
		}
	case resQuarantine:
		if o := l.quarantines[name]; o != nil {
			m = &o.ObjectMeta
		}
	}
	if m == nil {
		return 0, "", ""
	}
	v, _ := strconv.ParseUint(m.Annotations[AnnotationVersion], 10, 64)
	return v, m.ResourceVersion, m.Annotations[AnnotationBatch]
}

// set records in the listing the object a write left behind.
func (l *listing) set(r resource, name string, obj any) {
	switch o := obj.(type) {
	case *leaseObject:
		l.leases[name] = o
	case *sliceObject:
		l.slices[name] = o
	case *quarantineObject:
		l.quarantines[name] = o
	case nil:
		switch r {
		case resLease:
			delete(l.leases, name)
		case resSlice:
			delete(l.slices, name)
		case resQuarantine:
			delete(l.quarantines, name)
		}
	}
}

func batchID(epoch, seq uint64) string { return fmt.Sprintf("%d.%d", epoch, seq) }

// pendingOps returns the writes of prev's pending batch: the last batch
// any writer may have started; none where it was applied in full.
func (s *Store) pendingOps(prev journalSpec, l *listing) ([]walOp, error) {
	if prev.PendingCount == 0 {
		return nil, nil
	}
	chunks := []string{prev.Pending}
	for _, p := range prev.Parts {
		part := l.journals[p]
		if part == nil {
			// Parts are deleted only after their batch was applied in full.
			s.log.Info("journal part gone; its batch was applied", "part", p)
			return nil, nil
		}
		chunks = append(chunks, part.Spec.Part)
	}
	var ops []walOp
	for _, c := range chunks {
		if c == "" {
			continue
		}
		o, err := DecodeWAL(c)
		if err != nil {
			return nil, fmt.Errorf("head %s: %w", s.opts.Name, err)
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// rollForward applies what batch id's ops did not yet write.
func (s *Store) rollForward(ctx context.Context, id string, ops []walOp, l *listing) error {
	if len(ops) == 0 {
		return nil
	}
	var todo []write
	var done, skipped int
	for _, op := range ops {
		cur, rv, batch := l.current(op.Res, op.Name)
		rec := op.record()
		switch {
		case rec == nil && cur == 0, rec != nil && cur != 0 && batch == id:
			done++
			continue
		case cur != op.From:
			// Someone else wrote the object since: nothing to roll forward
			// safely. Only a person editing the store's objects does this.
			s.log.Warn("journaled write does not match its object; left as it is", "resource", op.Res, "name", op.Name,
				"journal_from", op.From, "object_version", cur)
			skipped++
			continue
		}
		todo = append(todo, write{res: op.Res, name: op.Name, from: op.From, fromRV: rv, rec: rec})
	}
	// A racing writer of the same batch (the writer this load fenced out,
	// still applying it) makes a write here fail with a conflict; the load
	// fails and the next one finds the object written.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for _, w := range todo {
		g.Go(func() error {
			obj, rv, err := s.apply(gctx, w, id)
			if err != nil {
				return fmt.Errorf("roll forward batch %s: %s %s: %w", id, w.res, w.name, err)
			}
			mu.Lock()
			l.set(w.res, w.name, obj)
			s.noteApplied(w.res, rv)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	s.log.Info("rolled the last batch forward", "batch", id, "writes", len(ops), "applied_now", len(todo),
		"applied_before", done, "skipped", skipped)
	return nil
}

// clearPending empties the head's journal once its batch is applied, so
// that its parts can go.
func (s *Store) clearPending(ctx context.Context) error {
	next := s.head
	next.Batch, next.PendingCount, next.Pending, next.Parts = "", 0, "", nil
	head := journalObject{TypeMeta: typeMeta("StoreJournal"), ObjectMeta: objectMeta(s.opts.Name, s.opts.Namespace, 1, s.headRV), Spec: next}
	rv, err := s.put(ctx, resJournal, s.opts.Name, &head, false)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w: head %s: %w", store.ErrConflict, ErrFenced, s.opts.Name, err)
	}
	if err != nil {
		return fmt.Errorf("clear head %s: %w", s.opts.Name, err)
	}
	s.head, s.headRV = next, rv
	return nil
}

// collectParts deletes the journal parts the head does not name: those
// of batches that never reached their commit point. Failures are left for
// the next load.
func (s *Store) collectParts(ctx context.Context, l *listing) {
	for name, j := range l.journals {
		if name == s.opts.Name || !strings.HasPrefix(name, s.opts.Name+"-part-") || slices.Contains(s.head.Parts, name) {
			continue
		}
		if _, err := s.remove(ctx, resJournal, name, j.ResourceVersion); err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn("delete journal part", "part", name, "err", err)
		}
		delete(l.journals, name)
	}
}

// apply performs one write with its resourceVersion precondition and
// returns the object written (nil for a delete) and the write's revision.
func (s *Store) apply(ctx context.Context, w write, batch string) (any, string, error) {
	var obj any
	var meta *metav1.ObjectMeta
	switch r := w.rec.(type) {
	case nil:
		rv, err := s.remove(ctx, w.res, w.name, w.fromRV)
		if err != nil {
			return nil, "", err
		}
		return nil, rv, nil
	case *store.Lease:
		o := s.leaseObject(r, w.name, r.Version, w.fromRV)
		obj, meta = o, &o.ObjectMeta
	case *store.Slice:
		o := s.sliceObject(r, r.Version, w.fromRV)
		obj, meta = o, &o.ObjectMeta
	case *store.Quarantine:
		o := s.quarantineObject(r, r.Version, w.fromRV)
		obj, meta = o, &o.ObjectMeta
	}
	meta.Annotations[AnnotationBatch] = batch
	rv, err := s.put(ctx, w.res, w.name, obj, w.from == 0)
	if err != nil {
		return nil, "", err
	}
	meta.ResourceVersion = rv
	return obj, rv, nil
}

// rebuild turns the listing into the state and the cache.
func (s *Store) rebuild(l *listing) (*store.State, error) {
	st := &store.State{}
	entries := make(map[string]entry, len(l.leases)+len(l.slices)+len(l.quarantines))
	vnis := make(map[uint16]string, len(l.leases))
	var errs []error
	for name, o := range l.leases {
		rec, err := decodeLease(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := rec.RecordKey()
		if other, ok := entries[key]; ok {
			errs = append(errs, fmt.Errorf("%w: vnileases %s and %s both hold lease %s", ErrBadObject, name, other.name, rec.Key))
			continue
		}
		if other, ok := vnis[rec.VNI]; ok {
			errs = append(errs, fmt.Errorf("%w: vni %d: vnileases %s (%s) and %s", ErrDuplicateVNI, rec.VNI, name, rec.Key, entries[other].name))
			continue
		}
		entries[key] = entry{res: resLease, name: name, version: rec.Version, rv: o.ResourceVersion, vni: rec.VNI}
		vnis[rec.VNI] = key
		st.Leases = append(st.Leases, rec)
	}
	for name, o := range l.slices {
		rec, err := decodeSlice(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := rec.RecordKey()
		if other, ok := entries[key]; ok {
			errs = append(errs, fmt.Errorf("%w: nodeslices %s and %s are both slice %s/%d", ErrBadObject, name, other.name, rec.Pool, rec.Index))
			continue
		}
		entries[key] = entry{res: resSlice, name: name, version: rec.Version, rv: o.ResourceVersion}
		st.Slices = append(st.Slices, rec)
	}
	for name, o := range l.quarantines {
		rec, err := decodeQuarantine(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := rec.RecordKey()
		if other, ok := entries[key]; ok {
			errs = append(errs, fmt.Errorf("%w: vniquarantines %s and %s both quarantine vni %d", ErrBadObject, name, other.name, rec.VNI))
			continue
		}
		entries[key] = entry{res: resQuarantine, name: name, version: rec.Version, rv: o.ResourceVersion}
		st.Quarantine = append(st.Quarantine, rec)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for k, v := range s.head.Meta {
		st.Meta = append(st.Meta, store.Meta{Key: k, Value: v.Value, Version: v.Version})
	}
	slices.SortFunc(st.Meta, func(a, b store.Meta) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(st.Leases, func(a, b store.Lease) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(st.Quarantine, func(a, b store.Quarantine) int {
		return cmp.Or(a.Released.Compare(b.Released), cmp.Compare(a.VNI, b.VNI))
	})
	slices.SortFunc(st.Slices, func(a, b store.Slice) int { return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Index, b.Index)) })
	s.entries, s.vnis = entries, vnis
	return st, nil
}

// Commit implements [store.Store]; see the package doc for how a batch is
// made atomic. It returns an error wrapping store.ErrConflict for a stale
// version (nothing written) or when the store was fenced by another writer
// (ErrFenced); ErrDuplicateVNI for a lease whose VNI another lease holds
// (nothing written); ErrNeedsLoad while a failed commit's outcome is not
// yet settled by Load.
func (s *Store) Commit(ctx context.Context, ops []store.Op) error {
	if len(ops) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("commit: store closed")
	}
	if !s.loaded {
		if _, err := s.loadLocked(ctx); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	if s.poisoned != nil {
		return fmt.Errorf("commit: %w (%w)", ErrNeedsLoad, s.poisoned)
	}
	p, err := planBatch(state{entries: s.entries, vnis: s.vnis, meta: s.head.Meta}, ops)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if len(p.writes) == 0 && !p.metaChanged {
		return nil
	}
	if err := s.commitPlan(ctx, p); err != nil {
		s.poisoned = err
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// commitPlan journals p in the head and applies it. Any error leaves the
// cache stale.
func (s *Store) commitPlan(ctx context.Context, p plan) error {
	next, err := s.journal(ctx, p)
	if err != nil {
		return err
	}
	// The batch is committed; apply its writes.
	rvs, err := s.applyWrites(ctx, p.writes, next.Batch)
	if err != nil {
		return err
	}
	for _, name := range next.Parts {
		if _, err := s.remove(ctx, resJournal, name, ""); err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn("delete journal part", "part", name, "err", err)
		}
	}
	s.cacheWrites(p.writes, rvs)
	return nil
}

// journal writes p's operations into the head, or into parts the head
// names, and returns the new head: the batch's commit point.
func (s *Store) journal(ctx context.Context, p plan) (journalSpec, error) {
	wal := make([]walOp, len(p.writes))
	for i, w := range p.writes {
		wal[i] = w.walOp()
	}
	chunks, err := encodeWAL(wal, partLimit)
	if err != nil {
		return journalSpec{}, fmt.Errorf("encode journal: %w", err)
	}
	next := s.head
	next.Seq++
	next.Meta, next.PendingCount, next.Pending, next.Parts = p.meta, len(wal), "", nil
	if len(next.Meta) == 0 {
		next.Meta = nil
	}
	next.Batch = batchID(next.Epoch, next.Seq)
	switch {
	case len(chunks) == 1 && len(chunks[0]) <= inlineLimit:
		next.Pending = chunks[0]
	case len(chunks) > 0:
		// Parts first: the head names them only once they exist.
		for i, c := range chunks {
			name := fmt.Sprintf("%s-part-%d-%d-%d", s.opts.Name, next.Epoch, next.Seq, i)
			part := journalObject{TypeMeta: typeMeta("StoreJournal"), ObjectMeta: objectMeta(name, s.opts.Namespace, 1, ""),
				Spec: journalSpec{Holder: s.opts.Identity, Epoch: next.Epoch, Seq: next.Seq, Part: c}}
			if _, err := s.put(ctx, resJournal, name, &part, true); err != nil {
				return journalSpec{}, fmt.Errorf("write journal part %s: %w", name, err)
			}
			next.Parts = append(next.Parts, name)
		}
	}
	head := journalObject{TypeMeta: typeMeta("StoreJournal"), ObjectMeta: objectMeta(s.opts.Name, s.opts.Namespace, 1, s.headRV), Spec: next}
	rv, err := s.put(ctx, resJournal, s.opts.Name, &head, false)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return journalSpec{}, fmt.Errorf("%w: %w: head %s: %w", store.ErrConflict, ErrFenced, s.opts.Name, err)
	}
	if err != nil {
		return journalSpec{}, fmt.Errorf("write head %s: %w", s.opts.Name, err)
	}
	s.head, s.headRV = next, rv
	return next, nil
}

// applyWrites applies a committed batch's writes, in parallel, and
// returns the resource version of each object written.
func (s *Store) applyWrites(ctx context.Context, writes []write, id string) ([]string, error) {
	rvs := make([]string, len(writes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for i, w := range writes {
		g.Go(func() error {
			_, rv, err := s.apply(gctx, w, id)
			if err != nil {
				if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (w.from != 0 && apierrors.IsNotFound(err)) {
					err = fmt.Errorf("%w: %w", store.ErrConflict, err)
				}
				return fmt.Errorf("%s %s: %w", w.res, w.name, err)
			}
			rvs[i] = rv
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("apply batch %s: %w", id, err)
	}
	return rvs, nil
}

// cacheWrites records applied writes in the cache, and their revisions in
// the head's Applied for the next head write.
func (s *Store) cacheWrites(writes []write, rvs []string) {
	for i, w := range writes {
		s.noteApplied(w.res, rvs[i])
		if old, ok := s.entries[w.key]; ok && old.vni != 0 && s.vnis[old.vni] == w.key {
			delete(s.vnis, old.vni)
		}
		if w.rec == nil {
			delete(s.entries, w.key)
			continue
		}
		e := entry{res: w.res, name: w.name, version: versionOf(w.rec), rv: rvs[i]}
		if l, ok := w.rec.(*store.Lease); ok {
			e.vni = l.VNI
			s.vnis[l.VNI] = w.key
		}
		s.entries[w.key] = e
	}
}

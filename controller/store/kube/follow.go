package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// followed are the resources a follower mirrors: the records. The
// journal (the head and its parts) is a few objects, listed at takeover.
var followed = []resource{resLease, resSlice, resQuarantine}

// mirror is a follower's copy of the store's record objects, kept by a
// list and then a watch of each resource. Objects in it are never
// changed, only replaced, so a snapshot may share them.
type mirror struct {
	mu  sync.Mutex
	res map[resource]*mirrorRes
	// changed is closed, and replaced, whenever a resource's rv moves.
	changed chan struct{}
}

type mirrorRes struct {
	// synced says objs is the resource as of rv: a list at rv, and every
	// watch event since. A gap in the watch clears it until a relist.
	synced bool
	rv     uint64
	objs   map[string]any
}

func newMirror() *mirror {
	m := &mirror{res: map[resource]*mirrorRes{}, changed: make(chan struct{})}
	for _, r := range followed {
		m.res[r] = &mirrorRes{}
	}
	return m
}

// notify wakes the waiters; m.mu is held.
func (m *mirror) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Follow keeps a copy of the store's objects in memory, so that a Load of
// this store (at a takeover) needs no full list; see the package doc,
// "Standby". It lists each record resource, then watches it from the
// list's revision, relisting after a gap in the watch ("too old resource
// version"). It returns nil when ctx ends, or an error once a resource
// has failed its bounded retries; Load then lists, as without Follow.
// Run at most one Follow per Store.
func (s *Store) Follow(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range followed {
		g.Go(func() error { return s.follow(gctx, r) })
	}
	err := g.Wait()
	s.mirror.mu.Lock()
	for _, mr := range s.mirror.res {
		mr.synced, mr.objs = false, nil
	}
	s.mirror.notify()
	s.mirror.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("follow store: %w", err)
}

// errWatchGap ends a watch whose start is older than the API server
// keeps: the resource is listed again.
var errWatchGap = errors.New("watch gap")

func (s *Store) follow(ctx context.Context, r resource) error {
	// Attempts count failures in a row: a watch that ran and ended (the
	// API server ends each after timeoutSeconds) starts them afresh.
	retry := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5, Attempts: 10}
	for ctx.Err() == nil {
		err := retry.Do(ctx, func(ctx context.Context) error {
			err := s.followOnce(ctx, r)
			if errors.Is(err, errWatchGap) {
				s.log.Info("store follower: watch gap; listing again", "resource", r)
				return nil
			}
			return err
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("%s: %w", r, err)
		}
	}
	return nil
}

// followOnce lists r unless the mirror of it is synced, then watches it
// until the watch ends.
func (s *Store) followOnce(ctx context.Context, r resource) error {
	m := s.mirror
	m.mu.Lock()
	mr := m.res[r]
	synced, from := mr.synced, mr.rv
	m.mu.Unlock()
	if !synced {
		objs, rv, err := s.listResource(ctx, r)
		if err != nil {
			return err
		}
		m.mu.Lock()
		mr.synced, mr.rv, mr.objs = true, rv, objs
		m.notify()
		m.mu.Unlock()
		s.log.Info("store follower listed", "resource", r, "objects", len(objs), "revision", rv)
		from = rv
	}
	return s.watch(ctx, r, from)
}

// listResource lists every object of r into a map by name, and returns
// the list's revision.
func (s *Store) listResource(ctx context.Context, r resource) (map[string]any, uint64, error) {
	objs := map[string]any{}
	var ls listStats
	var rv string
	var err error
	switch r {
	case resLease:
		rv, err = listAll(ctx, s, r, &ls, func(o *leaseObject) { o.ManagedFields = nil; objs[o.Name] = o })
	case resSlice:
		rv, err = listAll(ctx, s, r, &ls, func(o *sliceObject) { o.ManagedFields = nil; objs[o.Name] = o })
	case resQuarantine:
		rv, err = listAll(ctx, s, r, &ls, func(o *quarantineObject) { o.ManagedFields = nil; objs[o.Name] = o })
	default:
		return nil, 0, fmt.Errorf("follow %s: not a record resource", r)
	}
	if err != nil {
		return nil, 0, err
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: resourceVersion %q is not a revision: %w", r, rv, err)
	}
	return objs, n, nil
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watchTimeout is how long the API server keeps one watch open; the
// follower then watches again from where it was.
const watchTimeout = 5 * time.Minute

// watch applies r's events from revision from to the mirror until the
// stream ends (nil), breaks (an error) or starts too late (errWatchGap).
func (s *Store) watch(ctx context.Context, r resource, from uint64) error {
	body, err := s.rc.Get().Namespace(s.opts.Namespace).Resource(string(r)).
		Param("watch", "true").Param("resourceVersion", strconv.FormatUint(from, 10)).
		Param("allowWatchBookmarks", "true").Param("timeoutSeconds", strconv.Itoa(int(watchTimeout/time.Second))).
		Stream(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", r, err)
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	m := s.mirror
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("watch %s: %w", r, err)
		}
		if ev.Type == "ERROR" {
			var st metav1.Status
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone {
				m.mu.Lock()
				m.res[r].synced = false
				m.mu.Unlock()
				return errWatchGap
			}
			return fmt.Errorf("watch %s: %s", r, st.Message)
		}
		obj, meta, err := decodeObject(r, ev.Object)
		if err != nil {
			return fmt.Errorf("watch %s: %w", r, err)
		}
		rv, err := strconv.ParseUint(meta.ResourceVersion, 10, 64)
		if err != nil {
			return fmt.Errorf("watch %s: %w: resourceVersion %q is not a revision", r, ErrBadObject, meta.ResourceVersion)
		}
		m.mu.Lock()
		mr := m.res[r]
		switch ev.Type {
		case "ADDED", "MODIFIED":
			mr.objs[meta.Name] = obj
		case "DELETED":
			delete(mr.objs, meta.Name)
		}
		mr.rv = max(mr.rv, rv)
		m.notify()
		m.mu.Unlock()
	}
}

// decodeObject decodes an object of r, without its managedFields: the
// mirror keeps only what a load reads.
func decodeObject(r resource, raw []byte) (any, *metav1.ObjectMeta, error) {
	var obj any
	var meta *metav1.ObjectMeta
	switch r {
	case resLease:
		o := &leaseObject{}
		obj, meta = o, &o.ObjectMeta
	case resSlice:
		o := &sliceObject{}
		obj, meta = o, &o.ObjectMeta
	case resQuarantine:
		o := &quarantineObject{}
		obj, meta = o, &o.ObjectMeta
	default:
		return nil, nil, fmt.Errorf("%s: not a record resource", r)
	}
	if err := decodeJSON(raw, obj); err != nil {
		return nil, nil, err
	}
	meta.ManagedFields = nil
	return obj, meta, nil
}

// catchUp waits, up to d, until the mirror of each resource in want is
// synced at or past its revision, and returns a copy of the mirror of
// those that are, with the revision each copy is at; the others are left
// for a list. A resource missing from want is left for a list too.
func (m *mirror) catchUp(ctx context.Context, want map[resource]uint64, d time.Duration) (map[resource]map[string]any, map[resource]uint64) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	ready := func() (bool, <-chan struct{}) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for r, rv := range want {
			if mr := m.res[r]; mr == nil || !mr.synced || mr.rv < rv {
				return false, m.changed
			}
		}
		return true, m.changed
	}
	for {
		ok, changed := ready()
		if ok {
			break
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out, at := map[resource]map[string]any{}, map[resource]uint64{}
	for r, rv := range want {
		mr := m.res[r]
		if mr == nil || !mr.synced || mr.rv < rv {
			continue
		}
		out[r], at[r] = maps.Clone(mr.objs), mr.rv
	}
	return out, at
}

// Synced reports whether Follow's copy of every record resource is
// synced: listed, and its watch running or about to resume.
func (s *Store) Synced() bool {
	s.mirror.mu.Lock()
	defer s.mirror.mu.Unlock()
	for _, mr := range s.mirror.res {
		if !mr.synced {
			return false
		}
	}
	return true
}

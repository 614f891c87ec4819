package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrInvariant is returned when a change would break one of the rules a
// node's records always obey (see [Store]); the change is not made.
var ErrInvariant = errors.New("checkpoint invariant")

// Store is the agent's durable record of the pods it bound, and the only
// writer of the checkpoint file. It hands out copies: a caller changes a
// record through [Store.Put], [Store.Update] or [Store.Delete], which check
// the rules below before anything changes, and makes the changes durable
// with [Store.Save].
//
// The rules, checked on every change:
//   - a record's key is its [Holder.ID];
//   - a CXI service (NIC and ID) belongs to one record, pod or claim;
//   - a service carries its holder's VNI, and no VNI but it and those the
//     holder joined by name; no holder's own VNI is another's named one;
//   - records naming one lease agree on its VNI;
//   - a VNI from the node's own pool (Local) belongs to one record.
//
// Its methods are safe for concurrent use.
type Store struct {
	path string

	mu    sync.Mutex // guards state and gen
	state *State
	gen   uint64

	w writer

	// failed is told of every write that failed, whoever asked for it: the
	// agent counts them (slingshot_agent_checkpoint_errors_total) in both
	// front ends alike. Set before use; nil: nobody is told.
	failed func(error)
}

// OnWriteError tells f of every failed write from now on. Call it before
// the store is shared.
func (s *Store) OnWriteError(f func(error)) { s.failed = f }

// writer orders the writes of snapshots to the files.
type writer struct {
	mu      sync.Mutex // guards written and j
	written uint64     // the generation the files hold
	j       *journal
}

// Open loads the checkpoint at path (a missing file is an empty state for
// node) and returns the store that owns it. A state that breaks the rules
// is an error wrapping [ErrCorrupt]: it was not written by this package.
//
// It folds the journal the last run left into a fresh snapshot, so it
// needs path's directory writable. The store writes format version format
// from then on: [DefaultFormat] (what the last release reads, so that a
// rollback is safe) where format is 0, or [Version] once the operator
// gave up rolling back to a release that cannot read it.
func Open(path, node string, format int) (*Store, error) {
	st, seq, _, err := load(path, node)
	if err != nil {
		return nil, err
	}
	for _, id := range st.IDs() {
		if err := check(st, id, st.Holders[id]); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
		}
	}
	if format == 0 {
		format = DefaultFormat
	}
	j, err := openJournal(path, st, format, seq)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return &Store{path: path, state: st, w: writer{j: j}}, nil
}

// Path is the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// Get returns a copy of the record of holder id.
func (s *Store) Get(id string) (Holder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.state.Holders[id]
	if h == nil {
		return Holder{}, false
	}
	return h.Clone(), true
}

// IDs returns the holders' IDs of kind in sorted order.
func (s *Store) IDs(kind Kind) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, h := range s.state.Of(kind) {
		out = append(out, h.ID())
	}
	return out
}

// Holders returns copies of the records of kind, ordered by ID.
func (s *Store) Holders(kind Kind) []Holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Holder
	for _, h := range s.state.Of(kind) {
		out = append(out, h.Clone())
	}
	return out
}

// All returns copies of every record, ordered by ID.
func (s *Store) All() []Holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Holder, 0, len(s.state.Holders))
	for _, id := range s.state.IDs() {
		out = append(out, s.state.Holders[id].Clone())
	}
	return out
}

// Snapshot returns a deep copy of the whole state.
func (s *Store) Snapshot() *State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Clone()
}

// Put records h under its ID, replacing any record there.
func (s *Store) Put(h Holder) error {
	c := h.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := check(s.state, c.ID(), &c); err != nil {
		return err
	}
	s.state.Holders[c.ID()] = &c
	return nil
}

// Update applies change to a copy of id's record and stores the result.
// It returns the new record, false when id has no record, or an error
// wrapping [ErrInvariant] (the record is then unchanged).
func (s *Store) Update(id string, change func(*Holder)) (Holder, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.state.Holders[id]
	if cur == nil {
		return Holder{}, false, nil
	}
	c := cur.Clone()
	change(&c)
	if err := check(s.state, id, &c); err != nil {
		return cur.Clone(), true, err
	}
	s.state.Holders[id] = &c
	return c.Clone(), true, nil
}

// ForgetReused drops the service id on nic from every record and returns
// the IDs of the records it was in. The caller has just been handed id by
// the driver for a new service: the driver gives out only IDs no live
// service has, so a record naming it names a service already destroyed
// whose record was not yet updated (a cleanup between its destroy and its
// record change) or one a driver reload lost. Recording the new service
// must not fail for that stale name.
func (s *Store) ForgetReused(nic string, id uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	same := func(x Service) bool { return x.Is(nic, id) }
	for _, key := range s.state.IDs() {
		h := s.state.Holders[key]
		if slices.ContainsFunc(h.Services, same) {
			c := h.Clone()
			c.Services = slices.DeleteFunc(c.Services, same)
			s.state.Holders[key] = &c
			out = append(out, key)
		}
	}
	return out
}

// Delete drops id's record.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	delete(s.state.Holders, id)
	s.mu.Unlock()
}

// Save writes the current state durably. Concurrent saves share writes
// (group commit): the snapshot is taken when the file is written, not
// when Save is called, so a save whose change a write already carried
// returns when that write is done, and an older state never overwrites a
// newer one.
func (s *Store) Save() error {
	s.mu.Lock()
	s.gen++
	want := s.gen
	s.mu.Unlock()

	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if want <= s.w.written {
		return nil // a write that began after this change carried it
	}
	s.mu.Lock()
	gen := s.gen
	snap := s.state.Clone()
	s.mu.Unlock()
	if err := s.w.j.write(snap); err != nil {
		err = fmt.Errorf("save checkpoint: %w", err)
		if s.failed != nil {
			s.failed(err)
		}
		return err
	}
	s.w.written = gen
	return nil
}

// check checks the rules for h recorded under id against the other
// records of st.
func check(st *State, id string, h *Holder) error {
	switch {
	case h.Kind != KindPod && h.Kind != KindClaim:
		return fmt.Errorf("%w: record %q of kind %q", ErrInvariant, id, h.Kind)
	case h.Kind == KindClaim && h.UID == "":
		return fmt.Errorf("%w: a claim record without a UID", ErrInvariant)
	case h.ID() != id:
		return fmt.Errorf("%w: record %q names %s", ErrInvariant, id, h.ID())
	}
	if err := checkVNIs(st, h); err != nil {
		return err
	}
	for other, o := range st.Holders {
		if other == id {
			continue
		}
		for _, svc := range h.Services {
			if slices.ContainsFunc(o.Services, func(x Service) bool { return x.Is(svc.NIC, svc.ID) }) {
				return fmt.Errorf("%w: service %d on %s recorded for both %s and %s", ErrInvariant, svc.ID, svc.NIC, o, h)
			}
		}
		if h.LeaseKey != "" && o.LeaseKey == h.LeaseKey && o.VNI != h.VNI {
			return fmt.Errorf("%w: lease %s has VNI %d for %s and %d for %s", ErrInvariant, h.LeaseKey, o.VNI, o, h.VNI, h)
		}
		for _, l := range h.HSNLinks() {
			if slices.ContainsFunc(o.HSNLinks(), func(x HSNLink) bool { return x.Address.Addr() == l.Address.Addr() }) {
				return fmt.Errorf("%w: hsn address %s recorded for both %s and %s", ErrInvariant, l.Address.Addr(), o, h)
			}
		}
		if h.Local && o.Local && h.VNI != 0 && o.VNI == h.VNI {
			return fmt.Errorf("%w: node-pool VNI %d recorded for both %s and %s", ErrInvariant, h.VNI, o, h)
		}
	}
	return nil
}

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
//   - a record's key is its pod's "namespace/name", a claim's its UID;
//   - a CXI service (NIC and ID) belongs to one record, pod or claim;
//   - a service carries its pod's VNI;
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
// needs path's directory writable.
func Open(path, node string) (*Store, error) {
	st, seq, _, err := load(path, node)
	if err != nil {
		return nil, err
	}
	for _, key := range st.PodKeys() {
		if err := checkPod(st, key, st.Pods[key]); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
		}
	}
	for _, c := range st.Claims {
		if err := checkClaim(st, c); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
		}
	}
	j, err := openJournal(path, st, seq)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return &Store{path: path, state: st, w: writer{j: j}}, nil
}

// Path is the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// Get returns a copy of the record of key.
func (s *Store) Get(key string) (Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.state.Pods[key]
	if p == nil {
		return Pod{}, false
	}
	return p.Clone(), true
}

// Keys returns the recorded pods' keys in sorted order.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.PodKeys()
}

// Pods returns copies of every record, ordered by key.
func (s *Store) Pods() []Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Pod, 0, len(s.state.Pods))
	for _, key := range s.state.PodKeys() {
		out = append(out, s.state.Pods[key].Clone())
	}
	return out
}

// Snapshot returns a deep copy of the whole state.
func (s *Store) Snapshot() *State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Clone()
}

// Put records p under its key, replacing any record there.
func (s *Store) Put(p Pod) error {
	c := p.Clone()
	key := c.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := checkPod(s.state, key, &c); err != nil {
		return err
	}
	s.state.Pods[key] = &c
	return nil
}

// Update applies change to a copy of key's record and stores the result.
// It returns the new record, false when key has no record, or an error
// wrapping [ErrInvariant] (the record is then unchanged).
func (s *Store) Update(key string, change func(*Pod)) (Pod, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.state.Pods[key]
	if cur == nil {
		return Pod{}, false, nil
	}
	c := cur.Clone()
	change(&c)
	if err := checkPod(s.state, key, &c); err != nil {
		return cur.Clone(), true, err
	}
	s.state.Pods[key] = &c
	return c.Clone(), true, nil
}

// ForgetReused drops the service id on nic from every record, pod or
// claim, and returns the records it was in. The caller has just been
// handed id by the driver for a new service: the driver gives out only IDs
// no live service has, so a record naming it names a service already
// destroyed whose record was not yet updated (a cleanup between its
// destroy and its record change) or one a driver reload lost. Recording
// the new service must not fail for that stale name.
func (s *Store) ForgetReused(nic string, id uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	same := func(n string, i uint32) bool { return n == nic && i == id }
	for key, p := range s.state.Pods {
		if slices.ContainsFunc(p.Services, func(x Service) bool { return same(x.NIC, x.ID) }) {
			c := p.Clone()
			c.Services = slices.DeleteFunc(c.Services, func(x Service) bool { return same(x.NIC, x.ID) })
			s.state.Pods[key] = &c
			out = append(out, key)
		}
	}
	for uid, cl := range s.state.Claims {
		if slices.ContainsFunc(cl.Services, func(x ClaimService) bool { return same(x.NIC, x.ID) }) {
			c := cl.Clone()
			c.Services = slices.DeleteFunc(c.Services, func(x ClaimService) bool { return same(x.NIC, x.ID) })
			s.state.Claims[uid] = c
			out = append(out, "claim:"+uid)
		}
	}
	return out
}

// Delete drops key's record.
func (s *Store) Delete(key string) {
	s.mu.Lock()
	delete(s.state.Pods, key)
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

// checkPod checks the rules for p recorded under key against the other
// records of st.
func checkPod(st *State, key string, p *Pod) error {
	if p.Key() != key {
		return fmt.Errorf("%w: record %q names pod %q", ErrInvariant, key, p.Key())
	}
	if err := checkPodVNIs(st, key, p); err != nil {
		return err
	}
	for _, svc := range p.Services {
		if p.VNI != 0 && !slices.Contains(svc.VNIs, p.VNI) {
			return fmt.Errorf("%w: pod %s: service %d on %s lacks the pod's VNI %d", ErrInvariant, key, svc.ID, svc.NIC, p.VNI)
		}
	}
	for other, o := range st.Pods {
		if other == key {
			continue
		}
		for _, svc := range p.Services {
			if slices.ContainsFunc(o.Services, func(x Service) bool { return x.NIC == svc.NIC && x.ID == svc.ID }) {
				return fmt.Errorf("%w: service %d on %s recorded for both %s and %s", ErrInvariant, svc.ID, svc.NIC, other, key)
			}
		}
		if p.LeaseKey != "" && o.LeaseKey == p.LeaseKey && o.VNI != p.VNI {
			return fmt.Errorf("%w: lease %s has VNI %d for %s and %d for %s", ErrInvariant, p.LeaseKey, o.VNI, other, p.VNI, key)
		}
		if p.HSN != nil && o.HSN != nil && p.HSN.Address.Addr() == o.HSN.Address.Addr() {
			return fmt.Errorf("%w: hsn address %s recorded for both %s and %s", ErrInvariant, p.HSN.Address.Addr(), other, key)
		}
		if p.Local && o.Local && p.VNI != 0 && o.VNI == p.VNI {
			return fmt.Errorf("%w: node-pool VNI %d recorded for both %s and %s", ErrInvariant, p.VNI, other, key)
		}
	}
	for _, c := range st.Claims {
		for _, svc := range p.Services {
			if slices.ContainsFunc(c.Services, func(x ClaimService) bool { return x.NIC == svc.NIC && x.ID == svc.ID }) {
				return fmt.Errorf("%w: service %d on %s recorded for claim %s and pod %s", ErrInvariant, svc.ID, svc.NIC, c.Key(), key)
			}
		}
	}
	return nil
}

// Clone returns a deep copy of p.
func (p *Pod) Clone() Pod {
	c := *p
	c.Services = make([]Service, len(p.Services))
	for i, svc := range p.Services {
		c.Services[i] = Service{NIC: svc.NIC, ID: svc.ID, VNIs: slices.Clone(svc.VNIs)}
	}
	c.DeviceIDs = make(map[string][]string, len(p.DeviceIDs))
	for k, v := range p.DeviceIDs {
		c.DeviceIDs[k] = slices.Clone(v)
	}
	if p.Exited != nil {
		t := *p.Exited
		c.Exited = &t
	}
	if p.HSN != nil {
		h := *p.HSN
		c.HSN = &h
	}
	c.Options = p.Options.Clone()
	return c
}

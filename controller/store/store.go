package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrConflict is wrapped by Commit when a record's version is not the one
// an op expected. No op of the batch is applied then.
var ErrConflict = errors.New("store version conflict")

// Store is a durable home for the controller's state.
//
// Implementations are safe for concurrent use, though the controller
// commits from one goroutine at a time.
type Store interface {
	// Load returns the whole state.
	Load(ctx context.Context) (*State, error)
	// Commit applies ops atomically and durably: when it returns nil
	// every op is on stable storage. It returns an error wrapping
	// ErrConflict when an expected version differs, and then applies
	// none. After any other error the batch is either wholly absent or,
	// where the store failed past its commit point (the kube store's
	// journal write), completed by the next Load: the caller must not
	// assume either, and reloads before committing again, as the
	// controller does after every failed commit.
	Commit(ctx context.Context, ops []Op) error
	// Close releases the store.
	Close() error
}

// State is everything a store holds.
type State struct {
	Meta       []Meta
	Leases     []Lease
	Quarantine []Quarantine
	Slices     []Slice
}

// Scope says whom a VNI lease belongs to.
type Scope string

// Lease scopes.
const (
	// ScopeJob is a VNI shared by all pods of one controlling owner.
	ScopeJob Scope = "job"
	// ScopePod is a VNI of one pod.
	ScopePod Scope = "pod"
	// ScopeClaim is a VNI that several jobs share on purpose through a
	// named claim in their namespace.
	ScopeClaim Scope = "claim"
)

// Owner identifies the object a lease belongs to.
type Owner struct {
	// APIVersion and Kind of the owner, e.g. "batch/v1" and "Job".
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        string
}

// Lease is one VNI leased to an owner.
type Lease struct {
	// Key identifies the lease: "<scope>/<namespace>/<uid or claim name>".
	Key   string
	VNI   uint16
	Scope Scope
	Owner Owner
	// Nodes that hold the VNI now, sorted.
	Nodes []string
	// OwnerGone is set once the owner is known to be deleted; the VNI is
	// freed when OwnerGone is set and Nodes is empty.
	OwnerGone bool
	Created   time.Time
	// HWCollJob names the job object at the fabric manager that holds
	// (or is to hold) the job's hardware-collectives reservation; empty
	// for none. It is written with the lease, before the fabric manager
	// is asked, so that no reservation exists for a lease the store does
	// not know of; it is released after the lease's deletion is stored,
	// and whatever a crash left between the two is found by listing the
	// fabric manager's job objects.
	HWCollJob string
	Version   uint64
}

// Quarantine is a freed VNI that may not be handed out before
// Released plus the quarantine period.
type Quarantine struct {
	VNI      uint16
	Released time.Time
	Version  uint64
}

// Slice is one node slice of a pool that is leased to a node.
type Slice struct {
	Pool  string
	Index int
	Node  string
	// Expires is when the lease ends unless the node renews it.
	Expires time.Time
	// Allocated is how many ids the node last reported in use, at Reported.
	Allocated int
	Reported  time.Time
	// Open says the node allocates from the slice without further report
	// (its acquire, or its last report, said so): Allocated may have grown
	// since Reported, so the slice is not reclaimed while the node is only
	// silent.
	Open    bool
	Version uint64
}

// Meta is a small named value, such as the configured ranges.
type Meta struct {
	Key     string
	Value   string
	Version uint64
}

// Record is one of *Lease, *Quarantine, *Slice or *Meta.
type Record interface {
	// RecordKey names the record uniquely among records of its kind.
	RecordKey() string
}

// RecordKey implements [Record].
func (l *Lease) RecordKey() string { return "lease/" + l.Key }

// RecordKey implements [Record].
func (q *Quarantine) RecordKey() string { return fmt.Sprintf("quarantine/%d", q.VNI) }

// RecordKey implements [Record].
func (s *Slice) RecordKey() string { return fmt.Sprintf("slice/%s/%d", s.Pool, s.Index) }

// RecordKey implements [Record].
func (m *Meta) RecordKey() string { return "meta/" + m.Key }

// OpKind is a put or a delete.
type OpKind int

// Op kinds.
const (
	OpPut OpKind = iota + 1
	OpDelete
)

// Op is one versioned write.
type Op struct {
	Kind   OpKind
	Record Record
	// Expect is the version the record has now; 0 means it must not exist
	// (for a put) or is not checked (never valid for a delete). A put
	// stores version Expect+1.
	Expect uint64
}

// Put returns an op that writes r over version expect.
func Put(r Record, expect uint64) Op { return Op{Kind: OpPut, Record: r, Expect: expect} }

// Delete returns an op that removes r, which must have version expect.
func Delete(r Record, expect uint64) Op { return Op{Kind: OpDelete, Record: r, Expect: expect} }

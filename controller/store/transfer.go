package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// ExportKind and ExportVersion head an export document.
const (
	ExportKind    = "SlingshotControllerState"
	ExportVersion = 1
)

// ErrBadExport is wrapped when an export document cannot be read.
var ErrBadExport = errors.New("invalid export document")

// ErrImportConflict is wrapped when the target store holds a record that
// differs from the imported one.
var ErrImportConflict = errors.New("target store holds a different record")

// Document is what Export writes and Import reads: every record of a
// store without the store-local versions.
type Document struct {
	Kind       string             `json:"kind"`
	Version    int                `json:"version"`
	Meta       []ExportMeta       `json:"meta"`
	Leases     []ExportLease      `json:"leases"`
	Quarantine []ExportQuarantine `json:"quarantine"`
	Slices     []ExportSlice      `json:"slices"`
}

// ExportMeta is a Meta without its version.
type ExportMeta struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ExportLease is a Lease without its version.
type ExportLease struct {
	Key       string    `json:"key"`
	VNI       uint16    `json:"vni"`
	Scope     Scope     `json:"scope"`
	Owner     Owner     `json:"owner"`
	Nodes     []string  `json:"nodes,omitempty"`
	OwnerGone bool      `json:"ownerGone,omitempty"`
	Created   time.Time `json:"created"`
}

// ExportQuarantine is a Quarantine without its version.
type ExportQuarantine struct {
	VNI      uint16    `json:"vni"`
	Released time.Time `json:"released"`
}

// ExportSlice is a Slice without its version.
type ExportSlice struct {
	Pool      string    `json:"pool"`
	Index     int       `json:"index"`
	Node      string    `json:"node"`
	Expires   time.Time `json:"expires"`
	Allocated int       `json:"allocated"`
	Reported  time.Time `json:"reported"`
	Open      bool      `json:"open,omitempty"`
}

// ExportState returns st as an export document.
func ExportState(st *State) *Document {
	e := &Document{Kind: ExportKind, Version: ExportVersion, Meta: []ExportMeta{}, Leases: []ExportLease{},
		Quarantine: []ExportQuarantine{}, Slices: []ExportSlice{}}
	for _, m := range st.Meta {
		e.Meta = append(e.Meta, ExportMeta{Key: m.Key, Value: m.Value})
	}
	for _, l := range st.Leases {
		e.Leases = append(e.Leases, ExportLease{Key: l.Key, VNI: l.VNI, Scope: l.Scope, Owner: l.Owner,
			Nodes: l.Nodes, OwnerGone: l.OwnerGone, Created: l.Created})
	}
	for _, q := range st.Quarantine {
		e.Quarantine = append(e.Quarantine, ExportQuarantine{VNI: q.VNI, Released: q.Released})
	}
	for _, s := range st.Slices {
		e.Slices = append(e.Slices, ExportSlice{Pool: s.Pool, Index: s.Index, Node: s.Node, Expires: s.Expires,
			Allocated: s.Allocated, Reported: s.Reported, Open: s.Open})
	}
	slices.SortFunc(e.Meta, func(a, b ExportMeta) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(e.Leases, func(a, b ExportLease) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(e.Quarantine, func(a, b ExportQuarantine) int { return cmp.Compare(a.VNI, b.VNI) })
	slices.SortFunc(e.Slices, func(a, b ExportSlice) int { return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Index, b.Index)) })
	return e
}

// Export loads st and writes every record to w as one JSON document. Run
// it with the controller stopped: a store loaded by a second process may
// fence out the running one.
func Export(ctx context.Context, st Store, w io.Writer) error {
	state, err := st.Load(ctx)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(ExportState(state)); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// DecodeExport reads and checks an export document: its kind and version,
// and that no key, VNI, slice or meta key appears twice. It returns an
// error wrapping ErrBadExport.
func DecodeExport(r io.Reader) (*Document, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var e Document
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadExport, err)
	}
	if e.Kind != ExportKind || e.Version != ExportVersion {
		return nil, fmt.Errorf("%w: kind %q version %d, want %q version %d", ErrBadExport, e.Kind, e.Version, ExportKind, ExportVersion)
	}
	var errs []error
	seen := map[string]bool{}
	once := func(what string) bool {
		if seen[what] {
			errs = append(errs, fmt.Errorf("%w: %s appears twice", ErrBadExport, what))
			return false
		}
		seen[what] = true
		return true
	}
	for _, m := range e.Meta {
		if m.Key == "" {
			errs = append(errs, fmt.Errorf("%w: meta without a key", ErrBadExport))
		}
		once("meta " + m.Key)
	}
	for _, l := range e.Leases {
		if l.Key == "" || l.VNI == 0 {
			errs = append(errs, fmt.Errorf("%w: lease %q of vni %d: empty key or vni 0", ErrBadExport, l.Key, l.VNI))
			continue
		}
		once("lease " + l.Key)
		once(fmt.Sprintf("vni %d", l.VNI))
	}
	for _, q := range e.Quarantine {
		if q.VNI == 0 {
			errs = append(errs, fmt.Errorf("%w: quarantine of vni 0", ErrBadExport))
		}
		once(fmt.Sprintf("quarantined vni %d", q.VNI))
	}
	for _, s := range e.Slices {
		if s.Pool == "" || s.Index < 0 || s.Allocated < 0 {
			errs = append(errs, fmt.Errorf("%w: slice %s/%d: empty pool, negative index or negative allocated", ErrBadExport, s.Pool, s.Index))
		}
		once(fmt.Sprintf("slice %s/%d", s.Pool, s.Index))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &e, nil
}

// Records returns the document's records at version 0, ready to be put
// into an empty store.
func (e *Document) Records() []Record {
	var out []Record
	for _, m := range e.Meta {
		out = append(out, &Meta{Key: m.Key, Value: m.Value})
	}
	for _, l := range e.Leases {
		out = append(out, &Lease{Key: l.Key, VNI: l.VNI, Scope: l.Scope, Owner: l.Owner, Nodes: slices.Clone(l.Nodes),
			OwnerGone: l.OwnerGone, Created: l.Created})
	}
	for _, q := range e.Quarantine {
		out = append(out, &Quarantine{VNI: q.VNI, Released: q.Released})
	}
	for _, s := range e.Slices {
		out = append(out, &Slice{Pool: s.Pool, Index: s.Index, Node: s.Node, Expires: s.Expires,
			Allocated: s.Allocated, Reported: s.Reported, Open: s.Open})
	}
	return out
}

// ImportResult counts what Import did.
type ImportResult struct {
	// Written records, and Present ones the target already held as they
	// are in the document (a re-run after an interruption).
	Written, Present int
}

// Import reads an export document from r and writes its records into st
// in batches of batchSize (default 256). It is meant for an empty store
// with the controller stopped, and may be run again after an
// interruption: records the target already holds unchanged are skipped.
// It returns an error wrapping ErrBadExport for a bad document (nothing
// written) or ErrImportConflict when the target holds a different record
// of the same key (nothing written).
func Import(ctx context.Context, st Store, r io.Reader, batchSize int) (ImportResult, error) {
	var res ImportResult
	doc, err := DecodeExport(r)
	if err != nil {
		return res, fmt.Errorf("import: %w", err)
	}
	if batchSize <= 0 {
		batchSize = 256
	}
	cur, err := st.Load(ctx)
	if err != nil {
		return res, fmt.Errorf("import: load target: %w", err)
	}
	have := map[string]Record{}
	for _, r := range ExportState(cur).Records() {
		have[r.RecordKey()] = r
	}
	var todo []Record
	var conflicts []error
	for _, r := range doc.Records() {
		old, ok := have[r.RecordKey()]
		switch {
		case !ok:
			todo = append(todo, r)
		case sameRecord(old, r):
			res.Present++
		default:
			conflicts = append(conflicts, fmt.Errorf("%w: %s", ErrImportConflict, r.RecordKey()))
		}
	}
	if len(conflicts) > 0 {
		return res, fmt.Errorf("import: %w", errors.Join(conflicts...))
	}
	for len(todo) > 0 {
		n := min(batchSize, len(todo))
		ops := make([]Op, n)
		for i, r := range todo[:n] {
			ops[i] = Put(r, 0)
		}
		if err := st.Commit(ctx, ops); err != nil {
			return res, fmt.Errorf("import: after %d records: %w", res.Written, err)
		}
		res.Written += n
		todo = todo[n:]
	}
	return res, nil
}

// sameRecord compares records ignoring versions.
func sameRecord(a, b Record) bool {
	switch a := a.(type) {
	case *Meta:
		b, ok := b.(*Meta)
		return ok && a.Key == b.Key && a.Value == b.Value
	case *Lease:
		b, ok := b.(*Lease)
		return ok && a.Key == b.Key && a.VNI == b.VNI && a.Scope == b.Scope && a.Owner == b.Owner &&
			slices.Equal(a.Nodes, b.Nodes) && a.OwnerGone == b.OwnerGone && a.Created.Equal(b.Created)
	case *Quarantine:
		b, ok := b.(*Quarantine)
		return ok && a.VNI == b.VNI && a.Released.Equal(b.Released)
	case *Slice:
		b, ok := b.(*Slice)
		return ok && a.Pool == b.Pool && a.Index == b.Index && a.Node == b.Node && a.Expires.Equal(b.Expires) &&
			a.Allocated == b.Allocated && a.Reported.Equal(b.Reported) && a.Open == b.Open
	}
	return false
}

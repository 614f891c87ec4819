package kube

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controller/store"
)

// ErrDuplicateVNI is wrapped when a batch would give one VNI to two
// leases, or a load finds two leases of one VNI.
var ErrDuplicateVNI = errors.New("vni leased twice")

// resource names the kind of a record's object.
type resource string

const (
	resLease      resource = "vnileases"
	resSlice      resource = "nodeslices"
	resQuarantine resource = "vniquarantines"
	resJournal    resource = "storejournals"
)

// entry is what the store knows of one stored object.
type entry struct {
	res     resource
	name    string
	version uint64
	rv      string
	// vni is the lease's VNI (leases only).
	vni uint16
}

// write is one object write of a planned batch: the net effect of every
// op of the batch on one record.
type write struct {
	key string
	res resource
	// name of the object.
	name string
	// from is the record's version before the batch (0: absent), fromRV
	// the object's resourceVersion then.
	from   uint64
	fromRV string
	// rec is the record after the batch, its Version set; nil for a delete.
	rec store.Record
}

// plan is a batch checked against the store's state.
type plan struct {
	writes []write
	// meta is the meta map after the batch; metaChanged says it differs.
	meta        map[string]metaValue
	metaChanged bool
}

// state is the view a batch is checked against: the store's cache.
type state struct {
	entries map[string]entry
	vnis    map[uint16]string
	meta    map[string]metaValue
}

type simRecord struct {
	exists  bool
	version uint64
	rec     store.Record
}

// planBatch checks ops in order against st, without changing st, and folds
// them into one write per record. It returns an error wrapping
// store.ErrConflict for a version that differs from the one expected,
// ErrDuplicateVNI for a lease whose VNI another lease holds, or another
// error for an op that is malformed.
func planBatch(st state, ops []store.Op) (plan, error) {
	sim := map[string]*simRecord{}
	var order []string
	vnis := map[uint16]string{} // overlay of st.vnis; "" is a freed VNI
	vniHolder := func(v uint16) string {
		if k, ok := vnis[v]; ok {
			return k
		}
		return st.vnis[v]
	}
	meta := make(map[string]metaValue, len(st.meta))
	for k, v := range st.meta {
		meta[k] = v
	}
	p := plan{}
	for i, op := range ops {
		if err := checkOp(op); err != nil {
			return plan{}, fmt.Errorf("op %d: %w", i, err)
		}
		key := op.Record.RecordKey()
		if m, ok := op.Record.(*store.Meta); ok {
			if err := planMeta(meta, m, op); err != nil {
				return plan{}, fmt.Errorf("op %d (%s): %w", i, key, err)
			}
			p.metaChanged = true
			continue
		}
		r := sim[key]
		if r == nil {
			e, exists := st.entries[key]
			r = &simRecord{exists: exists, version: e.version}
			sim[key] = r
			order = append(order, key)
		}
		if err := checkVersion(op, r.exists, r.version); err != nil {
			return plan{}, fmt.Errorf("op %d (%s): %w", i, key, err)
		}
		// The VNI the record held before this op, to free it.
		var oldVNI uint16
		if l, ok := r.rec.(*store.Lease); ok && r.exists {
			oldVNI = l.VNI
		} else if r.exists && r.rec == nil {
			oldVNI = st.entries[key].vni
		}
		if oldVNI != 0 && vniHolder(oldVNI) == key {
			vnis[oldVNI] = ""
		}
		if op.Kind == store.OpDelete {
			r.exists, r.version, r.rec = false, 0, nil
			continue
		}
		rec := clone(op.Record, op.Expect+1)
		if l, ok := rec.(*store.Lease); ok {
			if h := vniHolder(l.VNI); h != "" && h != key {
				return plan{}, fmt.Errorf("op %d (%s): %w: vni %d is held by %s", i, key, ErrDuplicateVNI, l.VNI, h)
			}
			vnis[l.VNI] = key
		}
		r.exists, r.version, r.rec = true, op.Expect+1, rec
	}
	for _, key := range order {
		r := sim[key]
		e, existed := st.entries[key]
		if !existed && !r.exists {
			continue // created and deleted within the batch
		}
		w := write{key: key, res: resourceOf(key), name: e.name, from: e.version, fromRV: e.rv, rec: r.rec}
		if !existed {
			w.name = nameOf(r.rec)
		}
		p.writes = append(p.writes, w)
	}
	p.meta = meta
	return p, nil
}

// planMeta applies a meta op to the batch's copy of the meta values.
func planMeta(meta map[string]metaValue, m *store.Meta, op store.Op) error {
	cur, exists := meta[m.Key]
	if err := checkVersion(op, exists, cur.Version); err != nil {
		return err
	}
	if op.Kind == store.OpDelete {
		delete(meta, m.Key)
	} else {
		meta[m.Key] = metaValue{Value: m.Value, Version: op.Expect + 1}
	}
	return nil
}

func checkOp(op store.Op) error {
	switch op.Kind {
	case store.OpPut, store.OpDelete:
	default:
		return fmt.Errorf("unknown op kind %d", op.Kind)
	}
	if op.Kind == store.OpDelete && op.Expect == 0 {
		return errors.New("delete needs an expected version")
	}
	switch r := op.Record.(type) {
	case *store.Lease:
		if r == nil || r.Key == "" || r.VNI == 0 {
			return errors.New("lease without a key or a vni")
		}
	case *store.Slice:
		if r == nil || r.Pool == "" || r.Index < 0 || r.Allocated < 0 {
			return errors.New("slice without a pool, or with a negative index or allocated count")
		}
	case *store.Quarantine:
		if r == nil || r.VNI == 0 {
			return errors.New("quarantine of vni 0")
		}
	case *store.Meta:
		if r == nil || r.Key == "" {
			return errors.New("meta without a key")
		}
	case nil:
		return errors.New("op without a record")
	default:
		return fmt.Errorf("unknown record type %T", r)
	}
	return nil
}

func checkVersion(op store.Op, exists bool, cur uint64) error {
	switch {
	case op.Kind == store.OpPut && op.Expect == 0 && exists:
		return fmt.Errorf("%w: record exists at version %d, expected none", store.ErrConflict, cur)
	case op.Expect != 0 && !exists:
		return fmt.Errorf("%w: record does not exist, expected version %d", store.ErrConflict, op.Expect)
	case op.Expect != 0 && cur != op.Expect:
		return fmt.Errorf("%w: record at version %d, expected %d", store.ErrConflict, cur, op.Expect)
	}
	return nil
}

// clone copies a record and sets its version.
func clone(r store.Record, v uint64) store.Record {
	switch r := r.(type) {
	case *store.Lease:
		c := *r
		c.Nodes = append([]string(nil), r.Nodes...)
		if len(c.Nodes) == 0 {
			c.Nodes = nil
		}
		c.Version = v
		return &c
	case *store.Slice:
		c := *r
		c.Version = v
		return &c
	case *store.Quarantine:
		c := *r
		c.Version = v
		return &c
	}
	return nil
}

func resourceOf(key string) resource {
	switch {
	case len(key) > 6 && key[:6] == "lease/":
		return resLease
	case len(key) > 6 && key[:6] == "slice/":
		return resSlice
	}
	return resQuarantine
}

func nameOf(r store.Record) string {
	switch r := r.(type) {
	case *store.Lease:
		return LeaseName(r.Key)
	case *store.Slice:
		return SliceName(r.Pool, r.Index)
	case *store.Quarantine:
		return QuarantineName(r.VNI)
	}
	return ""
}

// The journal: a batch's writes as the head (and its parts) carry them.

// walOp is one write of a journaled batch.
type walOp struct {
	Res  resource `json:"res"`
	Name string   `json:"name"`
	// From is the record's version before the batch; 0: absent.
	From uint64 `json:"from"`
	// One of these is the record after the batch; none for a delete.
	Lease      *store.Lease      `json:"lease,omitempty"`
	Slice      *store.Slice      `json:"slice,omitempty"`
	Quarantine *store.Quarantine `json:"quarantine,omitempty"`
}

func (w write) walOp() walOp {
	op := walOp{Res: w.res, Name: w.name, From: w.from}
	switch r := w.rec.(type) {
	case *store.Lease:
		op.Lease = r
	case *store.Slice:
		op.Slice = r
	case *store.Quarantine:
		op.Quarantine = r
	}
	return op
}

// record returns the op's record after the batch, nil for a delete.
func (o walOp) record() store.Record {
	switch {
	case o.Lease != nil:
		return o.Lease
	case o.Slice != nil:
		return o.Slice
	case o.Quarantine != nil:
		return o.Quarantine
	}
	return nil
}

// encodeWAL encodes ops in chunks of at most limit bytes (one op larger
// than limit gets a chunk of its own).
func encodeWAL(ops []walOp, limit int) ([]string, error) {
	var chunks []string
	buf := []byte{'['}
	n := 0
	for _, op := range ops {
		b, err := json.Marshal(op)
		if err != nil {
			return nil, err
		}
		if n > 0 && len(buf)+len(b)+2 > limit {
			chunks = append(chunks, string(append(buf, ']')))
			buf, n = []byte{'['}, 0
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
		n++
	}
	if n > 0 {
		chunks = append(chunks, string(append(buf, ']')))
	}
	return chunks, nil
}

// DecodeWAL decodes and checks one chunk of a journaled batch, as Load
// reads it back from the API. It returns an error wrapping ErrBadObject
// for a chunk that is not a list of well-formed writes.
func DecodeWAL(chunk string) ([]walOp, error) {
	var ops []walOp
	if err := json.Unmarshal([]byte(chunk), &ops); err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrBadObject, err)
	}
	for i, op := range ops {
		n := 0
		for _, set := range []bool{op.Lease != nil, op.Slice != nil, op.Quarantine != nil} {
			if set {
				n++
			}
		}
		if n > 1 || op.Name == "" {
			return nil, fmt.Errorf("%w: journal op %d: no name, or more than one record", ErrBadObject, i)
		}
		switch op.Res {
		case resLease, resSlice, resQuarantine:
		default:
			return nil, fmt.Errorf("%w: journal op %d: unknown resource %q", ErrBadObject, i, op.Res)
		}
		if r := op.record(); r != nil {
			if err := checkOp(store.Put(r, 0)); err != nil {
				return nil, fmt.Errorf("%w: journal op %d: %w", ErrBadObject, i, err)
			}
			if resourceOf(r.RecordKey()) != op.Res || versionOf(r) == 0 {
				return nil, fmt.Errorf("%w: journal op %d: a %s record or version 0 in %s", ErrBadObject, i, r.RecordKey(), op.Res)
			}
		} else if op.From == 0 {
			return nil, fmt.Errorf("%w: journal op %d: delete of an absent record", ErrBadObject, i)
		}
	}
	return ops, nil
}

func versionOf(r store.Record) uint64 {
	switch r := r.(type) {
	case *store.Lease:
		return r.Version
	case *store.Slice:
		return r.Version
	case *store.Quarantine:
		return r.Version
	}
	return 0
}

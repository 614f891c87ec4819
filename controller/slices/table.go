package slices

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/internal/idset"
	"github.com/slingshot-k8s/slingshot/controller/store"
)

var (
	// ErrPoolFull is wrapped when every slice of a pool is leased.
	ErrPoolFull = errors.New("pool full")
	// ErrNotHeld is wrapped when a node names a slice it does not lease.
	ErrNotHeld = errors.New("slice not leased to this node")
	// ErrInUse is wrapped when a slice still has ids allocated.
	ErrInUse = errors.New("slice in use")
	// ErrTaken is matched by [TakenError]: a node asked for a slice that
	// another node leases.
	ErrTaken = errors.New("slice leased to another node")
	// ErrOutOfRange is wrapped when a node names a slice index the pool
	// does not have.
	ErrOutOfRange = errors.New("no such slice")
	// ErrNodeFull is wrapped when a node asks for a slice beyond
	// MaxPerNode of the pool.
	ErrNodeFull = errors.New("node holds as many slices of the pool as it may")
)

// TakenError says which node leases the slice another node asked for. It
// matches ErrTaken.
type TakenError struct {
	Pool  string
	Index int
	// Slice is the slice's VNIs or prefix, as [PoolSpec.SliceString] writes it.
	Slice string
	// Node leases the slice now.
	Node string
}

func (e *TakenError) Error() string {
	return fmt.Sprintf("pool %s slice %d (%s) is leased to node %s", e.Pool, e.Index, e.Slice, e.Node)
}

// Is reports whether target is ErrTaken.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// Usage is what a node reports about one slice it holds.
type Usage struct {
	// Allocated is how many ids the node has in use from the slice.
	Allocated int
	// Open says the node allocates from the slice without further report.
	Open bool
}

// MaxPerNode bounds the slices of one pool that one node may lease.
const MaxPerNode = 64

// Table is the lease state of one pool.
type Table struct {
	spec   PoolSpec
	taken  *idset.Set
	cursor int
	leases map[int]*entry
	byNode map[string]map[int]struct{}
}

// entry is one lease. rec is the leader's view: its Expires, Allocated
// count and Reported time move with every renewal in memory only. What
// the store holds of it agrees with rec on everything reclaim reads
// after a takeover: the node, whether anything is allocated (Allocated
// zero or not) and Open. Renew keeps that so by writing whenever a
// report changes one of them, and Version is the stored record's.
type entry struct {
	rec store.Slice
}

// NewTable returns an empty table of a valid spec.
func NewTable(spec PoolSpec) (*Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &Table{spec: spec, taken: idset.New(spec.Count()), cursor: -1,
		leases: map[int]*entry{}, byNode: map[string]map[int]struct{}{}}, nil
}

// Spec returns the pool's spec.
func (t *Table) Spec() PoolSpec { return t.spec }

// Leased returns the number of leased slices.
func (t *Table) Leased() int { return len(t.leases) }

// Load adds a stored lease. A lease loaded by a new leader (or after a
// reload) counts as renewed at now, the takeover: renewals are answered
// from memory and never stored, so the store cannot say when the node
// last renewed, and the node may have renewed with the previous leader a
// moment ago. Its Expires is therefore at least now+ttl, and the sweep
// reclaims nothing of a silent node before that plus the grace period.
// It returns an error when the slice lies outside the pool, as after a
// range change.
func (t *Table) Load(rec store.Slice, now time.Time, ttl time.Duration) error {
	if rec.Index < 0 || rec.Index >= t.spec.Count() {
		return fmt.Errorf("pool %s: slice %d leased to %s lies outside the pool's %d slices", t.spec.Name, rec.Index, rec.Node, t.spec.Count())
	}
	if !t.taken.Add(rec.Index) {
		return fmt.Errorf("pool %s: slice %d loaded twice", t.spec.Name, rec.Index)
	}
	e := &entry{rec: rec}
	if until := now.Add(ttl); e.rec.Expires.Before(until) {
		e.rec.Expires = until
	}
	t.leases[rec.Index] = e
	t.nodeSet(rec.Node)[rec.Index] = struct{}{}
	return nil
}

func (t *Table) nodeSet(node string) map[int]struct{} {
	m := t.byNode[node]
	if m == nil {
		m = map[int]struct{}{}
		t.byNode[node] = m
	}
	return m
}

// Held returns the node's slices in index order.
func (t *Table) Held(node string) []store.Slice {
	out := make([]store.Slice, 0, len(t.byNode[node]))
	for i := range t.byNode[node] {
		out = append(out, t.leases[i].rec)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// All returns every lease in index order.
func (t *Table) All() []store.Slice {
	out := make([]store.Slice, 0, len(t.leases))
	for _, e := range t.leases {
		out = append(out, e.rec)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// Acquire makes the node hold at least want slices (1..MaxPerNode),
// leasing new ones next-fit until now+ttl, open (the node leases a slice
// to allocate from it). It returns the ops to persist (none when the node
// already holds enough) or an error wrapping ErrPoolFull; a failed call
// changes nothing.
func (t *Table) Acquire(node string, want int, now time.Time, ttl time.Duration) ([]store.Op, error) {
	want = min(max(want, 1), MaxPerNode)
	need := want - len(t.byNode[node])
	if need <= 0 {
		return nil, nil
	}
	if free := t.spec.Count() - t.taken.Count(); free < need {
		return nil, fmt.Errorf("%w: pool %s (%s in slices of %d): %d of %d slices leased, node %s needs %d more",
			ErrPoolFull, t.spec.Name, t.spec.rangeString(), t.spec.SliceSize, t.taken.Count(), t.spec.Count(), node, need)
	}
	var ops []store.Op
	for range need {
		i := t.taken.NextFree(t.cursor + 1)
		if i < 0 {
			i = t.taken.NextFree(0)
		}
		t.cursor = i
		ops = append(ops, t.lease(node, i, now, ttl))
	}
	return ops, nil
}

// AcquireAt makes the node hold slice i, as for a fixed id outside the
// node's other slices: a free slice is leased to it until now+ttl, open;
// one it holds already is left as it is (no ops). It returns a
// *TakenError when another node holds the slice, and errors wrapping
// ErrOutOfRange for an index outside the pool or ErrNodeFull when the
// node holds MaxPerNode slices of the pool; a failed call changes nothing.
// It does not move the next-fit cursor.
func (t *Table) AcquireAt(node string, i int, now time.Time, ttl time.Duration) ([]store.Op, error) {
	if i < 0 || i >= t.spec.Count() {
		return nil, fmt.Errorf("%w: pool %s (%s) has slices 0-%d, not %d", ErrOutOfRange, t.spec.Name, t.spec.rangeString(), t.spec.Count()-1, i)
	}
	if e, ok := t.leases[i]; ok {
		if e.rec.Node == node {
			return nil, nil
		}
		return nil, &TakenError{Pool: t.spec.Name, Index: i, Slice: t.spec.SliceString(i), Node: e.rec.Node}
	}
	if n := len(t.byNode[node]); n >= MaxPerNode {
		return nil, fmt.Errorf("%w: node %s holds %d slices of pool %s, the most one node may hold; slice %d (%s) not leased",
			ErrNodeFull, node, n, t.spec.Name, i, t.spec.SliceString(i))
	}
	return []store.Op{t.lease(node, i, now, ttl)}, nil
}

// lease leases the free slice i to node, open, and returns the op that
// records it.
func (t *Table) lease(node string, i int, now time.Time, ttl time.Duration) store.Op {
	t.taken.Add(i)
	e := &entry{rec: store.Slice{Pool: t.spec.Name, Index: i, Node: node, Expires: now.Add(ttl), Reported: now, Open: true, Version: 1}}
	t.leases[i] = e
	t.nodeSet(node)[i] = struct{}{}
	rec := e.rec
	return store.Put(&rec, 0)
}

func (p PoolSpec) rangeString() string {
	if !p.VNIs.Empty() {
		return "vnis " + p.VNIs.String()
	}
	return p.Prefix.String()
}

// Renew extends the node's leases to now+ttl and records usage, per slice
// index as the node reports it; slices it does not report keep their last
// report. The renewal itself is kept in memory only: it returns ops (to
// persist before the node is answered) only for slices whose report
// changes what reclaim reads, that is whether anything is allocated and
// whether the slice is open; a changed count of ids in use alone is not
// written. It also returns the reported indices the node does not hold
// (lost).
func (t *Table) Renew(node string, usage map[int]Usage, now time.Time, ttl time.Duration) (ops []store.Op, lost []int) {
	until := now.Add(ttl)
	for i := range t.byNode[node] {
		e := t.leases[i]
		changed := false
		if u, ok := usage[i]; ok {
			changed = (u.Allocated != 0) != (e.rec.Allocated != 0) || u.Open != e.rec.Open
			e.rec.Allocated, e.rec.Open, e.rec.Reported = u.Allocated, u.Open, now
		}
		if until.After(e.rec.Expires) {
			e.rec.Expires = until
		}
		if changed {
			prev := e.rec.Version
			e.rec.Version++
			rec := e.rec
			ops = append(ops, store.Put(&rec, prev))
		}
	}
	for i := range usage {
		if _, ok := t.byNode[node][i]; !ok {
			lost = append(lost, i)
		}
	}
	sort.Ints(lost)
	return ops, lost
}

// Release gives slice i back for a node that has nothing allocated from
// it. It returns errors wrapping ErrNotHeld.
func (t *Table) Release(node string, i int) ([]store.Op, error) {
	e, ok := t.leases[i]
	if !ok || e.rec.Node != node {
		return nil, fmt.Errorf("%w: pool %s slice %d, node %s", ErrNotHeld, t.spec.Name, i, node)
	}
	return []store.Op{t.remove(i)}, nil
}

func (t *Table) remove(i int) store.Op {
	e := t.leases[i]
	delete(t.leases, i)
	delete(t.byNode[e.rec.Node], i)
	if len(t.byNode[e.rec.Node]) == 0 {
		delete(t.byNode, e.rec.Node)
	}
	t.taken.Remove(i)
	rec := e.rec
	return store.Delete(&rec, rec.Version)
}

// Gone tells when a node was seen deleted; gone is false while it exists
// or when that is not known.
type Gone func(node string) (since time.Time, gone bool)

// Reclaim frees the slices of gone nodes. A slice whose Node object
// nodeGone has reported deleted for at least grace is freed unless its
// node last reported ids allocated from it: the pods of a deleted node are
// deleted with it. A slice whose node is only silent, its lease expired
// for at least grace, is freed only when the node last reported nothing
// allocated and the slice closed: an open slice may have ids the node
// handed out after its last report. It returns the ops and the number of
// slices it kept although their node is gone (stranded); a stranded slice
// stays leased to its node, whose next heartbeat renews it.
func (t *Table) Reclaim(now time.Time, grace time.Duration, nodeGone Gone) (ops []store.Op, stranded int) {
	for i, e := range t.leases {
		deleted := false
		if nodeGone != nil {
			since, ok := nodeGone(e.rec.Node)
			deleted = ok && now.Sub(since) >= grace
		}
		expired := now.After(e.rec.Expires) && now.Sub(e.rec.Expires) >= grace
		switch {
		case !deleted && !expired:
			continue
		case e.rec.Allocated != 0 || !deleted && e.rec.Open:
			stranded++
			continue
		}
		ops = append(ops, t.remove(i))
	}
	return ops, stranded
}

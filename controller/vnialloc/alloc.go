package vnialloc

import (
	"errors"
	"fmt"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/internal/idset"
)

var (
	// ErrRangeFull is returned by Allocate when every VNI of the range is
	// leased or in quarantine.
	ErrRangeFull = errors.New("vni range full")
	// ErrOutOfRange is returned when a VNI lies outside the range, is
	// reserved, or lies in an excluded sub-range.
	ErrOutOfRange = errors.New("vni outside the allocatable range")
	// ErrTaken is returned by Take for a VNI already leased or quarantined.
	ErrTaken = errors.New("vni already taken")
)

type quarantined struct {
	vni   uint16
	until time.Time
}

// Allocator hands out VNIs of one range next-fit with a quarantine.
type Allocator struct {
	r        Range
	hold     time.Duration
	taken    *idset.Set // index = vni - r.Min; reserved and excluded VNIs are taken for good
	blocked  int        // how many ids are taken for good
	cursor   int        // index of the last VNI handed out, -1 before the first
	queue    []quarantined
	head     int
	inQueue  map[uint16]struct{}
	excluded []Range
}

// New returns an allocator over r that never hands out reserved VNIs nor
// any VNI of the excluded ranges, and keeps released VNIs in quarantine for
// hold. It returns an error wrapping ErrBadRange for an invalid or empty r.
func New(r Range, hold time.Duration, excluded ...Range) (*Allocator, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Empty() {
		return nil, fmt.Errorf("%w: empty", ErrBadRange)
	}
	a := &Allocator{r: r, hold: hold, taken: idset.New(r.Size()), cursor: -1,
		inQueue: map[uint16]struct{}{}, excluded: excluded}
	for v := int(r.Min); v <= int(r.Max); v++ {
		if !a.allocatable(uint16(v)) {
			a.taken.Add(v - int(r.Min))
			a.blocked++
		}
	}
	return a, nil
}

func (a *Allocator) allocatable(v uint16) bool {
	if !a.r.Contains(v) || Reserved(v) {
		return false
	}
	for _, x := range a.excluded {
		if x.Contains(v) {
			return false
		}
	}
	return true
}

// Range returns the allocator's range.
func (a *Allocator) Range() Range { return a.r }

// Allocate returns the next free VNI after the cursor, wrapping at the end
// of the range, or ErrRangeFull. Call Expire first so that VNIs whose
// quarantine has ended are free again.
func (a *Allocator) Allocate() (uint16, error) {
	i := a.taken.NextFree(a.cursor + 1)
	if i < 0 {
		i = a.taken.NextFree(0)
	}
	if i < 0 {
		return 0, fmt.Errorf("%w: all %d vnis of %s are leased or in quarantine", ErrRangeFull, a.Capacity(), a.r)
	}
	a.taken.Add(i)
	a.cursor = i
	return a.vni(i), nil
}

func (a *Allocator) vni(i int) uint16 { return uint16(i + int(a.r.Min)) }

// Take marks v leased, as when state is loaded. It returns an error
// wrapping ErrOutOfRange or ErrTaken.
func (a *Allocator) Take(v uint16) error {
	if !a.allocatable(v) {
		return fmt.Errorf("vni %d: %w %s", v, ErrOutOfRange, a.describe())
	}
	if !a.taken.Add(int(v) - int(a.r.Min)) {
		return fmt.Errorf("vni %d: %w", v, ErrTaken)
	}
	return nil
}

func (a *Allocator) describe() string {
	s := a.r.String()
	for _, x := range a.excluded {
		if !x.Empty() {
			s += " excluding " + x.String()
		}
	}
	return s
}

// Release puts a leased v into quarantine from now on. Releasing a VNI
// that is not leased does nothing. Releases must come in time order, as
// they do from one controller.
func (a *Allocator) Release(v uint16, now time.Time) {
	if !a.allocatable(v) || !a.taken.Has(int(v)-int(a.r.Min)) {
		return
	}
	if _, ok := a.inQueue[v]; ok {
		return
	}
	a.inQueue[v] = struct{}{}
	a.queue = append(a.queue, quarantined{vni: v, until: now.Add(a.hold)})
}

// Restore puts v into quarantine as released at releasedAt, as when state
// is loaded; entries must be restored in releasedAt order. VNIs outside
// the range are dropped (a quarantined VNI is not a live lease). It
// returns ErrTaken if v is leased.
func (a *Allocator) Restore(v uint16, releasedAt time.Time) error {
	if !a.allocatable(v) {
		return nil
	}
	if err := a.Take(v); err != nil {
		return err
	}
	a.Release(v, releasedAt)
	return nil
}

// Expire frees the VNIs whose quarantine ended by now and returns them.
func (a *Allocator) Expire(now time.Time) []uint16 {
	var out []uint16
	for a.head < len(a.queue) && !a.queue[a.head].until.After(now) {
		q := a.queue[a.head]
		a.head++
		delete(a.inQueue, q.vni)
		a.taken.Remove(int(q.vni) - int(a.r.Min))
		out = append(out, q.vni)
	}
	// Compact once the consumed head dominates, keeping appends O(1) amortised.
	if a.head > 1024 && a.head*2 > len(a.queue) {
		a.queue = append(a.queue[:0], a.queue[a.head:]...)
		a.head = 0
	}
	return out
}

// Quarantined reports whether v is in quarantine.
func (a *Allocator) Quarantined(v uint16) bool { _, ok := a.inQueue[v]; return ok }

// Cursor returns the last VNI handed out, or 0 before the first.
func (a *Allocator) Cursor() uint16 {
	if a.cursor < 0 {
		return 0
	}
	return a.vni(a.cursor)
}

// SetCursor restores the cursor saved with the state; values outside the
// range reset it to the start.
func (a *Allocator) SetCursor(v uint16) {
	if a.r.Contains(v) {
		a.cursor = int(v) - int(a.r.Min)
	} else {
		a.cursor = -1
	}
}

// Capacity returns the number of VNIs this allocator can ever hand out.
func (a *Allocator) Capacity() int { return a.r.Size() - a.blocked }

// Leased returns the number of VNIs leased, quarantine excluded.
func (a *Allocator) Leased() int { return a.taken.Count() - a.blocked - len(a.inQueue) }

// InQuarantine returns the number of VNIs in quarantine.
func (a *Allocator) InQuarantine() int { return len(a.inQueue) }

package event

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound how many events reach the API server. client-go's
// events.k8s.io broadcaster folds repeats of one identical event into a
// series, but every distinct message is its own write, and each Record
// starts a goroutine there: a storm of failing binds must not become a
// storm of API calls. So events pass two buckets before the broadcaster:
// one per object and reason, then one for the whole agent. What they
// refuse is counted and dropped; the log has every failure anyway.
type Limits struct {
	// PerKeyEvery is the steady rate of one object's events of one
	// reason, one per PerKeyEvery, after a burst of PerKeyBurst.
	PerKeyEvery time.Duration
	PerKeyBurst int
	// PerSecond and Burst bound all events together.
	PerSecond float64
	Burst     int
	// MaxKeys bounds the per-key buckets kept: beyond it the fullest
	// (idle) ones are forgotten, so memory stays bounded however many
	// pods come and go.
	MaxKeys int
}

// DefaultLimits are the agent's: a pod's or the node's event of one
// reason at most every 30s after 3, and 5 a second after a burst of 25
// for the agent as a whole (what the kubelet's own event client allows).
var DefaultLimits = Limits{PerKeyEvery: 30 * time.Second, PerKeyBurst: 3, PerSecond: 5, Burst: 25, MaxKeys: 4096}

// Limited is a Recorder that passes events to the next one within
// Limits. Safe for concurrent use.
type Limited struct {
	next    Recorder
	lim     Limits
	now     func() time.Time
	dropped func(Reason)
	all     *rate.Limiter

	mu   sync.Mutex
	keys map[limitKey]*rate.Limiter
}

type limitKey struct {
	obj    Object
	reason Reason
}

// NewLimited limits the events passed to next; dropped, if not nil, is
// told of each event refused. now is the clock (time.Now).
func NewLimited(next Recorder, lim Limits, now func() time.Time, dropped func(Reason)) *Limited {
	if lim.MaxKeys <= 0 {
		lim.MaxKeys = DefaultLimits.MaxKeys
	}
	return &Limited{
		next: next, lim: lim, now: now, dropped: dropped,
		all:  rate.NewLimiter(rate.Limit(lim.PerSecond), lim.Burst),
		keys: map[limitKey]*rate.Limiter{},
	}
}

// Record passes the event on unless its object's bucket or the agent's
// is empty.
func (l *Limited) Record(obj Object, reason Reason, what string) {
	if !l.allow(obj, reason) {
		if l.dropped != nil {
			l.dropped(reason)
		}
		return
	}
	l.next.Record(obj, reason, what)
}

func (l *Limited) allow(obj Object, reason Reason) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{obj, reason}
	kl := l.keys[k]
	if kl == nil {
		if len(l.keys) >= l.lim.MaxKeys {
			l.prune(now)
		}
		kl = rate.NewLimiter(rate.Every(l.lim.PerKeyEvery), l.lim.PerKeyBurst)
		l.keys[k] = kl
	}
	// The key's token is spent only when the agent's bucket has one too:
	// an event the agent's bucket refused has not been seen by anyone.
	if kl.TokensAt(now) < 1 {
		return false
	}
	if !l.all.AllowN(now, 1) {
		return false
	}
	return kl.AllowN(now, 1)
}

// prune forgets the buckets that are full again (idle long enough that
// forgetting them changes nothing), and when none is, half of them:
// memory stays bounded. The caller holds mu.
func (l *Limited) prune(now time.Time) {
	for k, kl := range l.keys {
		if kl.TokensAt(now) >= float64(l.lim.PerKeyBurst) {
			delete(l.keys, k)
		}
	}
	for k := range l.keys {
		if len(l.keys) < l.lim.MaxKeys/2 {
			break
		}
		delete(l.keys, k)
	}
}

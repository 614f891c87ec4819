package owner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults of the owner cache (see [WithOwnerCache]).
const (
	// DefaultOwnerTTL is how long an owner's metadata is reused. It only
	// has to outlast a gang start's burst of acquires: a Job of 4,096
	// pods is then read about once per TTL instead of once per pod.
	DefaultOwnerTTL = 10 * time.Second
	// DefaultOwnerCacheSize bounds the owners held at once.
	DefaultOwnerCacheSize = 16384
)

// followerRetries bounds how often a caller that waited on another's read
// of the same owner starts its own, when that read ended with its
// caller's context rather than an answer.
const followerRetries = 3

// ownerCache holds owner objects' metadata by UID for a short time, and
// lets concurrent lookups of one owner share a single read. An entry is
// keyed by the UID the pod's owner reference names and holds an object of
// that UID only, so an owner deleted and re-created under its name (a new
// UID) is never served from an entry of the old one; the old one's entry
// is dropped as soon as any read finds the name gone or held by another
// UID. It is safe for concurrent use and starts no goroutines: the first
// caller of a UID reads on its own goroutine and context, the others wait
// for it or for their own contexts.
type ownerCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time

	mu      sync.Mutex
	entries map[types.UID]cacheEntry
	byName  map[objectName]types.UID
	flights map[types.UID]*flight
}

// objectName names an owner object whatever its UID: the resource's group
// and name, namespace and name.
type objectName struct {
	group, resource, namespace, name string
}

type cacheEntry struct {
	obj     *metav1.PartialObjectMetadata
	name    objectName
	expires time.Time
}

// flight is one read in progress; done closes once obj and err are set.
type flight struct {
	done chan struct{}
	obj  *metav1.PartialObjectMetadata
	err  error
}

func newOwnerCache(ttl time.Duration, size int, now func() time.Time) *ownerCache {
	return &ownerCache{ttl: ttl, size: size, now: now,
		entries: map[types.UID]cacheEntry{}, byName: map[objectName]types.UID{}, flights: map[types.UID]*flight{}}
}

// get returns the metadata of the object named n with UID uid: from the
// cache while fresh, else from read, one read at a time per UID. read
// returns nil, nil when no object of that UID exists; that is never
// cached. The object returned is shared: callers must not modify it.
func (c *ownerCache) get(ctx context.Context, n objectName, uid types.UID,
	read func(context.Context) (*metav1.PartialObjectMetadata, error)) (*metav1.PartialObjectMetadata, error) {
	for range followerRetries {
		c.mu.Lock()
		if e, ok := c.entries[uid]; ok && c.ttl > 0 && c.now().Before(e.expires) {
			c.mu.Unlock()
			return e.obj, nil
		}
		f, waiting := c.flights[uid]
		if !waiting {
			f = &flight{done: make(chan struct{})}
			c.flights[uid] = f
		}
		c.mu.Unlock()
		if !waiting {
			return c.lead(ctx, f, n, uid, read)
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the read of %s %s/%s: %w", n.resource, n.namespace, n.name, context.Cause(ctx))
		}
		// The leader's context may have ended (its agent gave up) while
		// this caller's has not: its error is not an answer about the
		// owner, so read again, as leader or behind a new one.
		leaderGaveUp := errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)
		if !leaderGaveUp || ctx.Err() != nil {
			return f.obj, f.err
		}
	}
	return nil, fmt.Errorf("read %s %s/%s: %d reads in a row ended with their callers", n.resource, n.namespace, n.name, followerRetries)
}

// lead runs f's read and publishes its outcome.
func (c *ownerCache) lead(ctx context.Context, f *flight, n objectName, uid types.UID,
	read func(context.Context) (*metav1.PartialObjectMetadata, error)) (*metav1.PartialObjectMetadata, error) {
	f.obj, f.err = read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.flights, uid)
	close(f.done)
	switch {
	case f.err != nil:
	case f.obj == nil || f.obj.UID != uid:
		// Gone, or the name now holds another object.
		f.obj = nil
		c.forgetLocked(uid)
	case c.ttl > 0:
		c.putLocked(n, f.obj)
	}
	return f.obj, f.err
}

// putLocked stores obj, dropping any entry of another UID under its name
// (that object was deleted: the name now holds obj) and, when full, the
// expired entries, else one entry.
func (c *ownerCache) putLocked(n objectName, obj *metav1.PartialObjectMetadata) {
	if old, ok := c.byName[n]; ok && old != obj.UID {
		delete(c.entries, old)
	}
	if _, ok := c.entries[obj.UID]; !ok && len(c.entries) >= c.size {
		now := c.now()
		for uid, e := range c.entries {
			if !now.Before(e.expires) {
				c.forgetLocked(uid)
			}
		}
		for uid := range c.entries {
			if len(c.entries) < c.size {
				break
			}
			c.forgetLocked(uid)
		}
	}
	c.entries[obj.UID] = cacheEntry{obj: obj, name: n, expires: c.now().Add(c.ttl)}
	c.byName[n] = obj.UID
}

// forget drops the entry of uid: its object is known to be gone.
func (c *ownerCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(uid)
}

func (c *ownerCache) forgetLocked(uid types.UID) {
	e, ok := c.entries[uid]
	if !ok {
		return
	}
	delete(c.entries, uid)
	if c.byName[e.name] == uid {
		delete(c.byName, e.name)
	}
}

// len returns the number of entries, for tests.
func (c *ownerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Package keylock orders work by key: one holder of a key at a time, any
// number of keys at once.
package keylock

import "sync"

// Set is a set of mutexes by key, made on demand and dropped when unused.
// The zero Set is ready to use.
type Set struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns its unlock function.
func (k *Set) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*entry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &entry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// Len is the number of keys locked or waited for.
func (k *Set) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}

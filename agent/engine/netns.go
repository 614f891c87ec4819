package engine

import (
	"reflect"
	"sync"
)

// Handle holds a network namespace open: while it is open the kernel
// cannot free the namespace, so its inode, which a service names as its
// member, cannot pass to another namespace.
type Handle interface {
	Inode() uint32
	Close() error
}

// InodeOf is the inode h holds; 0 for none.
func InodeOf(h Handle) uint32 {
	if h == nil {
		return 0
	}
	return h.Inode()
}

// Namespaces keeps open the namespaces that live services name, by holder
// (a pod's key, a claim's [ClaimHolder]). A holder's handle is kept from
// its bind until its services are destroyed. Safe for concurrent use.
type Namespaces struct {
	mu   sync.Mutex // guards held
	held map[string]Handle
}

// Keep keeps h for holder, closing the handle kept before when it is
// another. A nil h is nothing to keep.
func (n *Namespaces) Keep(holder string, h Handle) {
	if h == nil {
		return
	}
	n.mu.Lock()
	if n.held == nil {
		n.held = map[string]Handle{}
	}
	old := n.held[holder]
	n.held[holder] = h
	n.mu.Unlock()
	if old != nil && !Same(old, h) {
		_ = old.Close()
	}
}

// Same reports whether a and b are the same handle. Handles of types
// that cannot be compared (structs with maps) are the same only when
// they are both nil.
func Same(a, b Handle) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// Release closes the handle kept for holder, once no service names it.
func (n *Namespaces) Release(holder string) {
	n.mu.Lock()
	h := n.held[holder]
	delete(n.held, holder)
	n.mu.Unlock()
	if h != nil {
		_ = h.Close()
	}
}

// Get returns the handle kept for holder; nil for none.
func (n *Namespaces) Get(holder string) Handle {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held[holder]
}

// Held returns the inode kept open for holder; 0 for none.
func (n *Namespaces) Held(holder string) uint32 { return InodeOf(n.Get(holder)) }

// CloseAll closes every handle, when the agent stops.
func (n *Namespaces) CloseAll() {
	n.mu.Lock()
	hs := n.held
	n.held = nil
	n.mu.Unlock()
	for _, h := range hs {
		_ = h.Close()
	}
}

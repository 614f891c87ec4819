package engine

import (
	"errors"
	"io/fs"
	"log/slog"
	"reflect"
	"sync"

	"github.com/slingshot-k8s/slingshot/agent/netns/pin"
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

// Pinner keeps a namespace held by a bind mount under the agent's state
// directory ([Pins] over *pin.Pins is one), so that the hold outlives the
// agent: while the agent is down or restarting, the kernel cannot hand the
// inode a service admits to another pod's new namespace.
type Pinner interface {
	Pin(holder string, ns pin.Namespace) (uint32, error)
	Unpin(holder string) error
	// Open opens the namespace pinned for holder; an error wraps
	// fs.ErrNotExist where there is none.
	Open(holder string) (Handle, error)
	List() ([]string, error)
}

// Pins is the bind-mount pins of package pin as a [Pinner].
type Pins struct{ *pin.Pins }

// Open opens the namespace pinned for holder.
func (p Pins) Open(holder string) (Handle, error) {
	h, err := p.Pins.Open(holder)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Namespaces keeps open the namespaces that live services name, by holder
// (a pod's key, a claim's checkpoint.ClaimID). A holder's handle is kept from
// its bind until its services are destroyed, and, with a Pinner, pinned
// for as long. Safe for concurrent use.
type Namespaces struct {
	mu   sync.Mutex // guards held
	held map[string]Handle
	// Pins, set before use, pins what is kept; nil: the open handles
	// alone hold, and only while the agent runs.
	Pins Pinner
	// Log is told of a pin that failed; nil: nobody.
	Log *slog.Logger
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
	if n.Pins != nil {
		n.pin(holder, h)
	}
	if old != nil && !Same(old, h) {
		_ = old.Close()
	}
}

// pin pins h's namespace for holder. A failure is logged: the open
// handle still holds the namespace while the agent runs, and the start-up
// reconcile trusts nothing it cannot verify.
func (n *Namespaces) pin(holder string, h Handle) {
	ns, ok := h.(pin.Namespace)
	var err error
	if !ok {
		err = errors.New("the handle has no file descriptor")
	} else {
		_, err = n.Pins.Pin(holder, ns)
	}
	if err != nil && n.Log != nil {
		n.Log.Warn("pin a held network namespace; it is held only while the agent runs", "holder", holder, "netns", h.Inode(), "err", err)
	}
}

// Pinned opens the namespace pinned for holder, held by the returned
// handle; an error wraps fs.ErrNotExist where none is (or no Pinner is
// set).
func (n *Namespaces) Pinned(holder string) (Handle, error) {
	if n.Pins == nil {
		return nil, fs.ErrNotExist
	}
	return n.Pins.Open(holder)
}

// Unpin drops the pins of holders for which keep is false: at start, those
// whose records are gone.
func (n *Namespaces) Unpin(keep func(holder string) bool) error {
	if n.Pins == nil {
		return nil
	}
	holders, err := n.Pins.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range holders {
		if !keep(h) {
			errs = append(errs, n.Pins.Unpin(h))
		}
	}
	return errors.Join(errs...)
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
	if n.Pins != nil {
		if err := n.Pins.Unpin(holder); err != nil && n.Log != nil {
			n.Log.Warn("unpin a namespace no service admits", "holder", holder, "err", err)
		}
	}
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

// Package ipamtest stands in for the controller's slice leasing in the
// tests of the allocator and of its users: one Controller leases the
// slices of its pools to many nodes, each never to two at once, and can
// fail or lose answers the way a network does.
package ipamtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
)

// ErrInjected is the error of an injected failure.
var ErrInjected = errors.New("injected controller failure")

// Controller leases slices of its pools to nodes.
type Controller struct {
	mu     sync.Mutex
	pools  map[string]ipam.Pool
	holder map[string]map[int]string // pool -> index -> node
	// failNext fails that many of the next calls before applying them;
	// loseNext applies that many and then fails them (lost answers).
	failNext, loseNext int
	calls              int
	// cursor makes leasing next-fit, as the controller's: a slice given
	// back is not the next one leased.
	cursor map[string]int
}

// NewController returns a controller of pools.
func NewController(pools ...ipam.Pool) *Controller {
	c := &Controller{pools: map[string]ipam.Pool{}, holder: map[string]map[int]string{}, cursor: map[string]int{}}
	for _, p := range pools {
		c.pools[p.Name] = p
		c.holder[p.Name] = map[int]string{}
	}
	return c
}

// Node returns the Slicer of one node.
func (c *Controller) Node(name string) ipam.Slicer { return &node{c: c, name: name} }

// FailNext makes the next n calls fail without effect.
func (c *Controller) FailNext(n int) { c.mu.Lock(); c.failNext = n; c.mu.Unlock() }

// LoseNext makes the next n calls take effect but answer an error.
func (c *Controller) LoseNext(n int) { c.mu.Lock(); c.loseNext = n; c.mu.Unlock() }

// Calls counts the calls made.
func (c *Controller) Calls() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

// Holder returns the node holding slice index of pool, or "".
func (c *Controller) Holder(pool string, index int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holder[pool][index]
}

// Held returns the slices node holds in pool.
func (c *Controller) Held(pool, node string) []ipam.Slice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldLocked(pool, node)
}

func (c *Controller) heldLocked(pool, node string) []ipam.Slice {
	p := c.pools[pool]
	var out []ipam.Slice
	for i := 0; i < p.Slices(); i++ {
		if c.holder[pool][i] == node {
			out = append(out, ipam.Slice{Pool: pool, Index: i, Prefix: p.SlicePrefix(i)})
		}
	}
	return out
}

// Take leases slice index of pool to node directly, as another node's
// agent would.
func (c *Controller) Take(pool string, index int, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holder[pool][index] = node
}

// begin counts a call and says whether to fail it before or after.
func (c *Controller) begin() (fail, lose bool) {
	c.calls++
	if c.failNext > 0 {
		c.failNext--
		return true, false
	}
	if c.loseNext > 0 {
		c.loseNext--
		return false, true
	}
	return false, false
}

type node struct {
	c    *Controller
	name string
}

func (n *node) Pools(context.Context) ([]ipam.Pool, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if fail, _ := c.begin(); fail {
		return nil, ErrInjected
	}
	var out []ipam.Pool
	for _, p := range c.pools {
		out = append(out, p)
	}
	return out, nil
}

func (n *node) Acquire(_ context.Context, pool string, count int) ([]ipam.Slice, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fail, lose := c.begin()
	if fail {
		return nil, ErrInjected
	}
	p, ok := c.pools[pool]
	if !ok {
		return nil, fmt.Errorf("no pool %q", pool)
	}
	for k := 0; k < p.Slices() && len(c.heldLocked(pool, n.name)) < count; k++ {
		i := (c.cursor[pool] + k) % p.Slices()
		if c.holder[pool][i] == "" {
			c.holder[pool][i] = n.name
			c.cursor[pool] = i + 1
		}
	}
	if len(c.heldLocked(pool, n.name)) < count {
		return nil, fmt.Errorf("%w: pool %s has no free slice", ipam.ErrPoolFull, pool)
	}
	if lose {
		return nil, ErrInjected
	}
	return c.heldLocked(pool, n.name), nil
}

func (n *node) AcquireAt(_ context.Context, pool string, index int) ([]ipam.Slice, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fail, lose := c.begin()
	if fail {
		return nil, ErrInjected
	}
	p, ok := c.pools[pool]
	if !ok || index < 0 || index >= p.Slices() {
		return nil, fmt.Errorf("no slice %d of pool %q", index, pool)
	}
	switch h := c.holder[pool][index]; h {
	case "", n.name:
		c.holder[pool][index] = n.name
	default:
		return nil, &ipam.SliceTakenError{Pool: pool, Index: index, Node: h}
	}
	if lose {
		return nil, ErrInjected
	}
	return c.heldLocked(pool, n.name), nil
}

func (n *node) Release(_ context.Context, pool string, index int) error {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fail, lose := c.begin()
	if fail {
		return ErrInjected
	}
	if c.holder[pool][index] == n.name {
		delete(c.holder[pool], index)
	}
	if lose {
		return ErrInjected
	}
	return nil
}

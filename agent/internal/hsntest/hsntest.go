// Package hsntest stands for package hsnlink in the engine's and the
// front ends' tests: a Linker that keeps the interfaces it was given, by
// namespace inode and name, as the kernel would.
package hsntest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/hsnlink"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
)

// Linker is an engine.Linker over a map. Safe for concurrent use.
type Linker struct {
	mu    sync.Mutex
	links map[uint32]map[string]hsnlink.Spec
	// FailAttach, when set, is every Attach's answer.
	FailAttach error
	attaches   int
}

// New returns a Linker holding no interface.
func New() *Linker { return &Linker{links: map[uint32]map[string]hsnlink.Spec{}} }

// Attach puts s in h's namespace; one of the name that differs is an
// hsnlink.ErrMismatch, as the real package answers. The hardware address
// is made of the namespace's inode and the interface's name, so that the
// same interface made again has the same one and another has another.
func (l *Linker) Attach(h engine.Handle, s hsnlink.Spec) (net.HardwareAddr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attaches++
	if l.FailAttach != nil {
		return nil, l.FailAttach
	}
	if s.Name == "" {
		s.Name = hsnlink.DefaultName
	}
	in := l.links[h.Inode()]
	if in == nil {
		in = map[string]hsnlink.Spec{}
		l.links[h.Inode()] = in
	}
	if old, ok := in[s.Name]; ok && old != s {
		return nil, hsnlink.ErrMismatch
	}
	in[s.Name] = s
	return MAC(h.Inode(), s.Name), nil
}

// Detach removes the interface name from h's namespace.
func (l *Linker) Detach(h engine.Handle, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.links[h.Inode()], name)
	return nil
}

// In returns the interface name in namespace ino, and whether it is there.
func (l *Linker) In(ino uint32, name string) (hsnlink.Spec, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.links[ino][name]
	return s, ok
}

// Attaches counts the calls to Attach.
func (l *Linker) Attaches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attaches
}

// MAC is the hardware address Attach gives the interface name in
// namespace ino: locally administered, unicast.
func MAC(ino uint32, name string) net.HardwareAddr {
	var sum byte
	for _, c := range []byte(name) {
		sum = sum*31 + c
	}
	mac, _ := net.ParseMAC(fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(ino>>24), byte(ino>>16), byte(ino>>8), byte(ino), sum))
	return mac
}

// StartAllocator runs an allocator until the test ends, and returns once
// it knows its pools: its first pass leases a slice only after it has
// recorded the pools it listed.
func StartAllocator(t *testing.T, s ipam.Slicer, state string) *ipam.Allocator {
	t.Helper()
	sig := &acquireSignal{Slicer: s, acquiring: make(chan struct{})}
	a, err := ipam.New(ipam.Options{StatePath: state, Slicer: sig, LowWater: 4, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-sig.acquiring:
	case <-time.After(10 * time.Second):
		t.Fatal("allocator leased no slice within 10s")
	}
	return a
}

// acquireSignal closes acquiring at the first Acquire.
type acquireSignal struct {
	ipam.Slicer
	once      sync.Once
	acquiring chan struct{}
}

func (s *acquireSignal) Acquire(ctx context.Context, pool string, count int) ([]ipam.Slice, error) {
	s.once.Do(func() { close(s.acquiring) })
	return s.Slicer.Acquire(ctx, pool, count)
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/netns/pin"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// The engine's invariants, checked after every step of random
// interleavings of both kinds of holder (pods and claims, as the two front
// ends give them): binds, sandboxes made again, exits with services busy,
// agent restarts, driver reloads (every service gone) and reboots (every
// namespace gone, inodes handed out again from the lowest free one, as the
// kernel does):
//
//   - no service admits a namespace that is gone, or that is another
//     holder's current one;
//   - a holder bound just now has each service admit its current
//     namespace alone;
//   - every service on the driver is recorded by one holder, and every
//     recorded service of a holder is on the driver;
//   - the node holds at the controller exactly the leases its records
//     hold.

// kernel is the namespaces of a node: a namespace lives while anything
// holds it (its sandbox, an open handle, a pin), and a new one gets the
// lowest inode no live one has.
type kernel struct {
	mu   sync.Mutex
	refs map[uint32]int
}

const firstInode = 4026532000

func (k *kernel) create() uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	ino := uint32(firstInode)
	for k.refs[ino] > 0 {
		ino++
	}
	k.refs[ino] = 1
	return ino
}

func (k *kernel) ref(ino uint32, d int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refs[ino] += d
	if k.refs[ino] <= 0 {
		delete(k.refs, ino)
	}
}

func (k *kernel) alive(ino uint32) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refs[ino] > 0
}

// open opens the live namespace ino.
func (k *kernel) open(ino uint32) (Handle, error) {
	if ino == 0 || !k.alive(ino) {
		return nil, fmt.Errorf("namespace %d: %w", ino, fs.ErrNotExist)
	}
	k.ref(ino, 1)
	return &kHandle{k: k, ino: ino}, nil
}

// kHandle is an open namespace; it implements pin.Namespace for the pins.
type kHandle struct {
	k      *kernel
	ino    uint32
	closed bool
}

func (h *kHandle) Inode() uint32 { return h.ino }
func (h *kHandle) Fd() uintptr   { return uintptr(h.ino) }
func (h *kHandle) Close() error {
	if !h.closed {
		h.closed = true
		h.k.ref(h.ino, -1)
	}
	return nil
}

// kPins are bind-mount pins: each holds its namespace alive until unpinned
// or the node reboots.
type kPins struct {
	k    *kernel
	mu   sync.Mutex
	pins map[string]uint32
}

func (p *kPins) Pin(holder string, ns pin.Namespace) (uint32, error) {
	ino := ns.(*kHandle).ino
	p.k.ref(ino, 1)
	p.mu.Lock()
	old, had := p.pins[holder]
	p.pins[holder] = ino
	p.mu.Unlock()
	if had {
		p.k.ref(old, -1)
	}
	return ino, nil
}

func (p *kPins) Unpin(holder string) error {
	p.mu.Lock()
	old, had := p.pins[holder]
	delete(p.pins, holder)
	p.mu.Unlock()
	if had {
		p.k.ref(old, -1)
	}
	return nil
}

func (p *kPins) Open(holder string) (Handle, error) {
	p.mu.Lock()
	ino, ok := p.pins[holder]
	p.mu.Unlock()
	if !ok {
		return nil, fs.ErrNotExist
	}
	return p.k.open(ino)
}

func (p *kPins) List() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for h := range p.pins {
		out = append(out, h)
	}
	return out, nil
}

// controller leases one VNI per job and knows which the node holds.
type controller struct {
	mu   sync.Mutex
	vnis map[string]uint16
	held map[string]bool
}

func (c *controller) AcquireJobVNI(_ context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	job, _, _ := strings.Cut(pod.Name, "-")
	key := "job/" + job
	v, ok := c.vnis[key]
	if !ok {
		v = uint16(2000 + len(c.vnis))
		c.vnis[key] = v
	}
	c.held[key] = true
	return controllerclient.Lease{Key: key, VNI: v, Scope: controllerclient.ScopeJob}, nil
}

func (c *controller) ReleaseJobVNI(_ context.Context, l controllerclient.Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, l.Key)
	return nil
}

// model is what the world knows of a holder: its current sandbox's
// namespace (the one its services must admit) and its NICs.
type model struct {
	h    checkpoint.Holder
	ns   uint32
	nics []string
}

type engineWorld struct {
	t     *testing.T
	rng   *rand.Rand
	dir   string
	k     *kernel
	pins  *kPins
	ctl   *controller
	sims  map[string]*sim.Device
	drv   DriverMap
	e     *Engine
	live  map[string]*model // by holder ID
	next  int
	trace []string
}

func newEngineWorld(t *testing.T, seed uint64) *engineWorld {
	k := &kernel{refs: map[uint32]int{}}
	w := &engineWorld{t: t, rng: rand.New(rand.NewPCG(seed, 11)), dir: t.TempDir(), k: k,
		pins: &kPins{k: k, pins: map[string]uint32{}}, ctl: &controller{vnis: map[string]uint16{}, held: map[string]bool{}},
		sims: map[string]*sim.Device{}, drv: DriverMap{}, live: map[string]*model{}}
	once := backoff.Policy{Initial: time.Millisecond, Attempts: 2, Wait: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	for _, name := range []string{"cxi0", "cxi1"} {
		s, err := sim.Open(filepath.Join(w.dir, "sim"), name, sim.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		w.sims[name] = s
		w.drv[name] = cxi.NewClient(uapi.NewDevice(s), cxi.WithDestroyRetry(once))
	}
	w.start()
	return w
}

func (w *engineWorld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

func (w *engineWorld) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "))
}

// start is the agent's start: the engine over the record on disk, the
// start-up reconcile of every holder.
func (w *engineWorld) start() {
	st, err := checkpoint.Open(filepath.Join(w.dir, "checkpoint.json"), "n1", 0)
	if err != nil {
		w.fail("open the record: %v", err)
	}
	w.e, err = New(Config{Node: "n1", Store: st, NICs: w.drv, Leaser: w.ctl, Pins: w.pins,
		Defaults: func() Defaults { return Defaults{TCs: cxi.DefaultTrafficClasses} }})
	if err != nil {
		w.fail("engine: %v", err)
	}
	ctx := w.t.Context()
	if _, err := w.e.ForgetLost(ctx); err != nil {
		w.fail("forget lost: %v", err)
	}
	for _, id := range sortedIDs(w.live) {
		m := w.live[id]
		// The runtime may not answer for a pod at a start: then only its
		// pin can vouch for the namespace its services admit.
		silent := w.rng.IntN(4) == 0
		open := func() (Handle, error) {
			if silent {
				return nil, errors.New("the runtime does not answer")
			}
			return w.k.open(m.ns)
		}
		how, _, err := w.e.Revive(ctx, id, m.nics, open, nil)
		if err != nil {
			w.fail("revive %s: %v", id, err)
		}
		w.logf("  revived %s (runtime silent %v): %d", id, silent, how)
	}
	w.e.DropStalePins()
	if _, err := w.e.Orphans(ctx, OrphanRules{Lo: 1024, Hi: 4095}, func(checkpoint.Holder) bool { return true }); err != nil {
		w.fail("orphans: %v", err)
	}
}

func sortedIDs(m map[string]*model) []string { return slices.Sorted(maps.Keys(m)) }

// stop ends the agent's process: its open handles close; pins stay.
func (w *engineWorld) stop() { w.e.Namespaces().CloseAll() }

func (w *engineWorld) admit() {
	w.next++
	kind := checkpoint.KindPod
	if w.rng.IntN(2) == 0 {
		kind = checkpoint.KindClaim
	}
	name := fmt.Sprintf("j%d-%d", w.rng.IntN(3), w.next)
	h := checkpoint.Holder{Kind: kind, UID: fmt.Sprintf("uid-%d", w.next), Namespace: "ns", Name: name}
	if kind == checkpoint.KindPod {
		h.DeviceIDs = map[string][]string{}
	} else {
		h.Pods = []checkpoint.ClaimPod{{UID: "pod-" + h.UID, Namespace: "ns", Name: name}}
	}
	nics := []string{"cxi0", "cxi1"}[:1+w.rng.IntN(2)]
	if w.rng.IntN(3) == 0 {
		nics = []string{"cxi1"}
	}
	m := &model{h: h, ns: w.k.create(), nics: nics}
	ctx := w.t.Context()
	id := h.ID()
	unlock := w.e.Lock(id)
	rec, err := w.e.Admit(ctx, h, controllerclient.PodRef{Namespace: "ns", Name: name, UID: h.UID}, "")
	if err != nil {
		w.fail("admit %s: %v", id, err)
	}
	m.h = rec
	w.live[id] = m
	created, err := w.e.Ensure(ctx, id, nics, nil)
	if err != nil {
		w.e.Rollback(ctx, id, created, true, nil)
		w.fail("ensure %s: %v", id, err)
	}
	unlock()
	w.logf("admit %s on %v, netns %d", id, nics, m.ns)
	w.bind(id)
}

func (w *engineWorld) bind(id string) {
	m := w.live[id]
	ns, err := w.k.open(m.ns)
	if err != nil {
		w.fail("open %s's namespace %d: %v", id, m.ns, err)
	}
	unlock := w.e.Lock(id)
	_, err = w.e.Bind(w.t.Context(), id, ns, nil)
	unlock()
	if err != nil {
		w.fail("bind %s to %d: %v", id, m.ns, err)
	}
	w.logf("bind %s to %d", id, m.ns)
	if err := w.e.Check(w.t.Context(), id, m.nics, m.ns); err != nil {
		w.fail("%s bound just now: %v", id, err)
	}
}

// remake makes the holder's sandbox again: a new namespace, the old one
// gone unless something still holds it. The front end's bind comes later.
func (w *engineWorld) remake(id string) {
	m := w.live[id]
	old := m.ns
	w.k.ref(old, -1)
	m.ns = w.k.create()
	w.logf("remake %s's sandbox: %d → %d", id, old, m.ns)
}

// exit ends the holder: its sandbox goes, the engine tears it down; a
// service may be busy a while.
func (w *engineWorld) exit(id string) {
	m := w.live[id]
	ctx := w.t.Context()
	var busy *checkpoint.Service
	if rec, ok := w.e.Get(id); ok && len(rec.Services) > 0 && w.rng.IntN(4) == 0 {
		s := rec.Services[0]
		busy = &s
		if err := w.sims[s.NIC].SetInUse(s.ID, 1); err != nil {
			w.fail("%v", err)
		}
	}
	w.k.ref(m.ns, -1)
	m.ns = 0
	unlock := w.e.Lock(id)
	defer unlock()
	done, err := w.e.Teardown(ctx, id, nil)
	w.logf("exit %s (busy %v): done %v, %v", id, busy != nil, done, err)
	if busy == nil && !done {
		w.fail("tear down %s: %v", id, err)
	}
	if busy != nil {
		if done || !errors.Is(err, cxi.ErrBusy) {
			w.fail("tear down %s with a busy service: done %v, %v; want it kept, busy", id, done, err)
		}
		if err := w.sims[busy.NIC].SetInUse(busy.ID, 0); err != nil {
			w.fail("%v", err)
		}
		if done, err = w.e.Teardown(ctx, id, nil); !done {
			w.fail("tear down %s once idle: %v", id, err)
		}
	}
	delete(w.live, id)
}

// restart stops and starts the agent; meanwhile sandboxes may be made
// again, the driver may lose every service, or the node may reboot.
func (w *engineWorld) restart() {
	w.stop()
	reboot := w.rng.IntN(4) == 0
	reload := reboot || w.rng.IntN(3) == 0
	w.logf("restart (reboot %v, driver reload %v)", reboot, reload)
	if reboot {
		w.k.mu.Lock()
		w.k.refs = map[uint32]int{}
		w.k.mu.Unlock()
		w.pins.mu.Lock()
		w.pins.pins = map[string]uint32{}
		w.pins.mu.Unlock()
		for _, id := range sortedIDs(w.live) {
			w.live[id].ns = w.k.create()
			w.logf("  %s's sandbox made again after the reboot: %d", id, w.live[id].ns)
		}
	} else {
		for _, id := range sortedIDs(w.live) {
			if w.rng.IntN(2) == 0 {
				w.remake(id)
			}
		}
	}
	if reload {
		for nic, d := range w.drv {
			svcs, err := d.List(w.t.Context())
			if err != nil {
				w.fail("%v", err)
			}
			for _, s := range svcs {
				if !s.IsDefault() && !s.System {
					if err := d.Destroy(w.t.Context(), s.ID); err != nil {
						w.fail("wipe %s: %v", nic, err)
					}
				}
			}
		}
	}
	w.check(false)
	w.start()
}

// check checks the invariants; bound: every live holder was just bound.
func (w *engineWorld) check(bound bool) {
	ctx := w.t.Context()
	recorded := map[string]string{} // "nic/id" → holder
	for _, h := range w.e.store.All() {
		for _, s := range h.Services {
			recorded[fmt.Sprintf("%s/%d", s.NIC, s.ID)] = h.ID()
		}
	}
	current := map[uint32]string{}
	for id, m := range w.live {
		if m.ns != 0 {
			current[m.ns] = id
		}
	}
	onDriver := map[string]bool{}
	for _, nic := range []string{"cxi0", "cxi1"} {
		svcs, err := w.drv[nic].List(ctx)
		if err != nil {
			w.fail("%v", err)
		}
		for _, s := range svcs {
			if s.IsDefault() || s.System {
				continue
			}
			key := fmt.Sprintf("%s/%d", nic, s.ID)
			onDriver[key] = true
			holder, ok := recorded[key]
			if !ok {
				w.fail("service %s on the driver is nobody's record", key)
			}
			for _, mem := range s.Members {
				if mem.Type != cxi.MemberNetNS {
					w.fail("service %s admits %v", key, mem)
				}
				if !w.k.alive(mem.ID) {
					w.fail("service %s of %s admits namespace %d, which is gone: its inode can pass to another pod", key, holder, mem.ID)
				}
				if other, ok := current[mem.ID]; ok && other != holder {
					w.fail("service %s of %s admits namespace %d, which is %s's", key, holder, mem.ID, other)
				}
			}
		}
	}
	if bound {
		for key, holder := range recorded {
			if !onDriver[key] {
				w.fail("service %s of %s is recorded but not on the driver", key, holder)
			}
		}
	}
	w.ctl.mu.Lock()
	held := maps.Clone(w.ctl.held)
	w.ctl.mu.Unlock()
	want := map[string]bool{}
	for _, h := range w.e.store.All() {
		if !h.Released {
			want[h.LeaseKey] = true
		}
	}
	if !maps.Equal(held, want) {
		w.fail("the controller says the node holds %v; its records hold %v", held, want)
	}
}

func (w *engineWorld) pick() (string, bool) {
	if len(w.live) == 0 {
		return "", false
	}
	ids := sortedIDs(w.live)
	return ids[w.rng.IntN(len(ids))], true
}

// TestEngineInterleavings runs random interleavings of both kinds of
// holder through the engine alone, checking the invariants after every
// step.
func TestEngineInterleavings(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			w := newEngineWorld(t, seed)
			for range 40 {
				switch n := w.rng.IntN(10); {
				case n < 3 || len(w.live) == 0:
					w.admit()
				case n < 5:
					if id, ok := w.pick(); ok {
						w.remake(id)
						w.check(false)
						w.bind(id)
					}
				case n < 7:
					if id, ok := w.pick(); ok {
						w.exit(id)
					}
				case n < 9:
					w.restart()
					// The holders' next sandbox or container start binds
					// what the start could not verify.
					for _, id := range sortedIDs(w.live) {
						w.check(false)
						w.bind(id)
					}
				default:
					if id, ok := w.pick(); ok {
						w.bind(id)
					}
				}
				w.check(true)
			}
			for _, id := range sortedIDs(w.live) {
				w.exit(id)
			}
			w.check(true)
			if n := len(w.e.store.All()); n != 0 {
				w.fail("%d records left after every holder exited", n)
			}
		})
	}
}

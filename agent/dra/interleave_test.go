package dra

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

var interleaveSeeds = flag.Int("interleave.seeds", 30, "seeds of TestDRAInvariantsUnderInterleavings (make fuzz runs more)")

// liveNamespaces are the network namespaces that exist: a sandbox's from
// its start to its end. Opening another one's path fails as the kernel
// does (no such file), and a held handle keeps its namespace alive.
type liveNamespaces struct {
	live map[uint32]bool
	held map[uint32]int // open handles
}

type trackedNetns struct {
	w      *liveNamespaces
	inode  uint32
	closed bool
}

func (n *trackedNetns) Inode() uint32 { return n.inode }
func (n *trackedNetns) Close() error {
	if !n.closed {
		n.closed = true
		n.w.held[n.inode]--
	}
	return nil
}

func (l *liveNamespaces) open(path string) (Netns, error) {
	var inode uint32
	if _, err := fmt.Sscanf(filepath.Base(path), "%d", &inode); err != nil || !l.live[inode] {
		return nil, fmt.Errorf("open network namespace %s: %w", path, fs.ErrNotExist)
	}
	l.held[inode]++
	return &trackedNetns{w: l, inode: inode}, nil
}

// draWorld is one node in DRA mode under random events: claims prepared
// and unprepared, sandboxes started (some binds failing on the second
// NIC), pods exiting, a second pod trying a shared claim, NRI going down
// and up, agent restarts, the kubelet losing its claim state, and the
// collector's passes. It checks the invariants after every step.
type draWorld struct {
	t     *testing.T
	rng   *rand.Rand
	r     *rig
	flaky *flakyBind
	nri   *NRIState
	ns    *liveNamespaces
	api   *fakeClaims
	col   *Collector
	now   time.Time

	claims    map[string]*resourceapi.ResourceClaim // the kubelet's prepared claims, by UID
	sandboxes map[string]uint32                     // running pods' namespaces, by pod name
	nextInode uint32
	next      int
	log       []string
}

func newDRAWorld(t *testing.T, seed uint64) *draWorld {
	w := &draWorld{t: t, rng: rand.New(rand.NewPCG(seed, 7)), r: newRig(t), ns: &liveNamespaces{live: map[uint32]bool{}, held: map[uint32]int{}},
		api: &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{}}, now: time.Now(),
		claims: map[string]*resourceapi.ResourceClaim{}, sandboxes: map[string]uint32{}, nextInode: 4026540000}
	w.flaky = &flakyBind{Services: w.r.cfg.NICs[1].Drv}
	w.r.cfg.NICs[1].Drv = w.flaky
	w.nri = NewNRIState("nri.sock", nil)
	w.nri.set(true, nil)
	w.r.cfg.BindReady = w.nri.Ready
	w.r.cfg.OpenNetns = w.ns.open
	w.restart()
	return w
}

// restart is a new agent process on the same state: the namespaces the
// old one held are closed with it.
func (w *draWorld) restart() {
	if w.r.m != nil {
		w.r.m.Close()
	}
	w.r.restart()
	if _, err := w.r.m.Reconcile(context.Background(), 1024, 65535); err != nil {
		w.fail("reconcile: %v", err)
	}
	w.col = &Collector{M: w.r.m, Claims: w.api, Grace: time.Minute, Now: func() time.Time { return w.now }}
	if w.nri.Ready() == nil {
		w.synchronize()
	}
}

func (w *draWorld) synchronize() {
	var sbs []Sandbox
	for pod, inode := range w.sandboxes {
		sbs = append(sbs, sandbox(pod, inode))
	}
	w.r.m.Synchronize(context.Background(), sbs)
}

func (w *draWorld) podOf(uid string) string {
	return w.claims[uid].Status.ReservedFor[0].Name
}

func (w *draWorld) pick(m map[string]*resourceapi.ResourceClaim) string {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	if len(keys) == 0 {
		return ""
	}
	return keys[w.rng.IntN(len(keys))]
}

func (w *draWorld) step() {
	ctx := context.Background()
	switch op := w.rng.IntN(11); op {
	case 0, 1: // the kubelet prepares a new pod's claim
		w.next++
		uid := fmt.Sprintf("c%d", w.next)
		pod := fmt.Sprintf("job%d-%d", w.rng.IntN(3), w.next)
		nics := [][]string{{"cxi0"}, {"cxi1"}, {"cxi0", "cxi1"}}[w.rng.IntN(3)]
		c := claim(uid, pod, "", nics...)
		_, err := w.r.m.Prepare(ctx, c)
		w.logf("prepare %s for %s on %v: %v", uid, pod, nics, err)
		if err == nil {
			w.claims[uid] = c
			w.api.claims["ns/"+c.Name] = c
		}
	case 2, 3: // a prepared claim's pod starts its sandbox, maybe failing on cxi1
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		pod := w.podOf(uid)
		if _, running := w.sandboxes[pod]; running {
			return
		}
		w.nextInode++
		inode := w.nextInode
		w.ns.live[inode] = true
		w.flaky.fail = w.rng.IntN(3) == 0
		err := error(nil)
		if w.nri.Ready() == nil {
			err = w.r.m.Bind(ctx, sandbox(pod, inode))
		}
		w.flaky.fail = false
		w.logf("sandbox %s netns %d (nri up %v): %v", pod, inode, w.nri.Ready() == nil, err)
		if err != nil {
			delete(w.ns.live, inode) // the runtime tears the sandbox down
			return
		}
		w.sandboxes[pod] = inode
		if w.nri.Ready() == nil {
			if _, err := w.r.m.Check(ctx, sandbox(pod, inode), nil); err != nil {
				w.fail("container of %s after a bind that succeeded: %v", pod, err)
			}
		}
	case 4: // a pod exits; the kubelet unprepares its claim, the claim goes
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		w.stopPod(w.podOf(uid))
		err := w.r.m.Unprepare(ctx, uid)
		w.logf("unprepare %s: %v", uid, err)
		if err == nil {
			w.forget(uid)
		}
	case 5: // a second pod tries a bound claim
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		rec, ok := w.r.m.store.get(uid)
		if !ok || rec.BoundPod == "" {
			return
		}
		w.nextInode++
		w.ns.live[w.nextInode] = true
		second := sandbox("intruder-0", w.nextInode)
		_, err := w.r.m.Check(ctx, second, w.r.m.env(rec))
		delete(w.ns.live, w.nextInode)
		w.logf("second pod on %s: %v", uid, err)
		if err == nil {
			w.fail("a second pod's container started on claim %s", uid)
		}
	case 6: // NRI goes down or comes back
		if w.nri.Ready() == nil {
			w.nri.set(false, fmt.Errorf("runtime restarting"))
			w.logf("nri down")
		} else {
			w.nri.set(true, nil)
			w.synchronize()
			w.logf("nri up, synchronized")
		}
	case 7: // the agent restarts
		w.restart()
		w.logf("agent restarted")
	case 8: // the kubelet loses its state of a claim; its pod ends, the claim goes
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		w.stopPod(w.podOf(uid))
		w.forget(uid)
		w.logf("kubelet lost %s", uid)
	default: // time passes; the collector runs
		w.now = w.now.Add(40 * time.Second)
		rep, err := w.col.Pass(ctx)
		w.logf("collector pass: %+v %v", rep, err)
	}
}

func (w *draWorld) stopPod(pod string) {
	if inode, ok := w.sandboxes[pod]; ok {
		delete(w.sandboxes, pod)
		if w.ns.held[inode] == 0 {
			delete(w.ns.live, inode) // nothing holds it: the kernel frees it
		}
	}
}

func (w *draWorld) forget(uid string) {
	delete(w.api.claims, "ns/"+w.claims[uid].Name)
	delete(w.claims, uid)
}

// check: no service admits a namespace that no handle of the agent and no
// running sandbox keeps alive; no service admits more than one namespace,
// nor a claim's services two; no service without a record; no lease
// without a holder, no holder without its lease; a claim's VNI is its
// job's alone.
func (w *draWorld) check() {
	recorded := map[string]map[uint32]*Record{}
	held := map[string]bool{}
	for _, rec := range w.r.m.Records() {
		var bound []uint32
		for _, s := range rec.Services {
			if recorded[s.NIC] == nil {
				recorded[s.NIC] = map[uint32]*Record{}
			}
			recorded[s.NIC][s.ID] = rec
			if s.Netns != 0 && !slices.Contains(bound, s.Netns) {
				bound = append(bound, s.Netns)
			}
		}
		if len(bound) > 1 {
			w.fail("claim %s's services admit namespaces %v", rec.UID, bound)
		}
		if !rec.Released && rec.LeaseKey != "" {
			held[rec.LeaseKey] = true
			if !w.r.leaser.holds(rec.LeaseKey) {
				w.fail("claim %s holds lease %s, which the node gave back", rec.UID, rec.LeaseKey)
			}
		}
	}
	w.r.leaser.mu.Lock()
	for key := range w.r.leaser.held {
		if !held[key] {
			w.r.leaser.mu.Unlock()
			w.fail("lease %s held by the node with no claim holding it", key)
		}
	}
	w.r.leaser.mu.Unlock()
	for nic := range w.r.sims {
		for _, s := range w.r.services(nic) {
			rec := recorded[nic][s.Desc.SvcID]
			if rec == nil {
				w.fail("service %d on %s has no record", s.Desc.SvcID, nic)
			}
			if s.Open || len(s.UIDs)+len(s.GIDs) > 0 || len(s.NetNS) > 1 {
				w.fail("service %d on %s admits %+v", s.Desc.SvcID, nic, s)
			}
			for _, inode := range s.NetNS {
				if !w.ns.live[inode] {
					w.fail("service %d on %s (claim %s) admits namespace %d, which is gone: its inode can pass to another pod", s.Desc.SvcID, nic, rec.UID, inode)
				}
				if w.ns.held[inode] == 0 && !slices.Contains(slices.Collect(mapsValues(w.sandboxes)), inode) {
					w.fail("service %d on %s admits namespace %d, which nothing holds open", s.Desc.SvcID, nic, inode)
				}
			}
		}
	}
}

func mapsValues(m map[string]uint32) func(func(uint32) bool) {
	return func(yield func(uint32) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func (w *draWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *draWorld) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.log, "\n  "))
}

// Issue 24: random interleavings of Prepare, Unprepare, sandbox starts
// with binds failing on the n-th NIC, a second pod on a bound claim, NRI
// disconnects, agent restarts, kubelet claim loss and the collector keep
// the invariants after every step: no service admits an unheld
// namespace; no claim bound to two pods; no lease without a holder; no
// holder without a lease.
func TestDRAInvariantsUnderInterleavings(t *testing.T) {
	seeds := *interleaveSeeds
	if testing.Short() {
		seeds = min(seeds, 10)
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			w := newDRAWorld(t, uint64(seed))
			for range 80 {
				w.step()
				w.check()
			}
			// Every claim's lease and services go with its claim.
			for uid := range w.claims {
				w.stopPod(w.podOf(uid))
				if err := w.r.m.Unprepare(context.Background(), uid); err != nil {
					t.Fatal(err)
				}
			}
			w.claims = map[string]*resourceapi.ResourceClaim{}
			w.api.claims = map[string]*resourceapi.ResourceClaim{}
			for range 4 {
				w.now = w.now.Add(time.Minute)
				if _, err := w.col.Pass(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			w.check()
			w.r.checkEmpty()
		})
	}
}

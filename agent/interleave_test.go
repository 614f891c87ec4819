package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
)

// world is one node under random events: pods of a few jobs start and
// exit, jobs are deleted, binds fail, the kubelet's List fails or comes
// back empty after a restart, and the agent restarts. It checks the
// invariants of issue 15 (items 1 to 3) after every step.
type world struct {
	t    *testing.T
	rng  *rand.Rand
	dir  string
	r    *rig
	w    *podwatch.Watcher
	k    *fakeKubelet
	ctl  *jobController
	ns   fakeNetns
	devs []string // device IDs, over both NICs

	jobs     []string              // job names pods start in; a deleted job is replaced
	nextJob  int                   // suffix of the next job name
	nextPod  int                   // suffix of the next pod and UID
	live     map[string]kubeletPod // pods bound and not ended, by UID
	jobByUID map[string]string     // each pod's Job's UID, as its sandbox's labels say
	listDown bool                  // List fails
	notReady bool                  // the kubelet restarted; its sources are not ready
	log      []string
}

func newWorld(t *testing.T, seed uint64) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, seed)), dir: t.TempDir(), k: newFakeKubelet(t),
		ctl: newJobController(), ns: fakeNetns{}, live: map[string]kubeletPod{}, jobByUID: map[string]string{}}
	for range 3 {
		w.jobs = append(w.jobs, w.newJobName())
	}
	w.start()
	return w
}

// start builds the agent on the world's state directory, as at a start.
func (w *world) start() {
	w.r = newRig(w.t, w.dir, nil, w.ns)
	// The runtime names each pod's Job, so that a job's pods share its
	// lease on the node (engine.Leases.AcquireShared).
	w.r.b.netns = metaNetns{fakeNetns: w.ns, job: w.jobByUID}
	w.r.b.logger = testLoggerDiscard()
	w.r.b.useLeaser(w.ctl)
	w.devs = w.devs[:0]
	for _, n := range []string{"cxi0", "cxi1"} {
		for s := range 6 {
			id := fmt.Sprintf("%s-share%d", n, s)
			w.r.b.devNIC[id] = n
			w.devs = append(w.devs, id)
		}
	}
	// Each nudge of the kubelet is an hour after the last: the nudge
	// pacing, tested in podwatch, does not hold back a sweep here.
	var hours atomic.Int64
	w.w = podwatch.New(podwatch.Config{Lister: w.k, Resources: []string{res}, PluginDir: w.k.dir,
		MinListInterval: 1, Nudge: w.k.nudge, Logger: w.r.b.logger,
		Now: func() time.Time { return time.Unix(hours.Add(1)*3600, 0) }})
	w.r.b.pods = w.w
}

func (w *world) newJobName() string {
	w.nextJob++
	return fmt.Sprintf("job%d", w.nextJob)
}

// freeDevice returns a device no pod the kubelet knows holds.
func (w *world) freeDevice() (string, bool) {
	w.k.mu.Lock()
	defer w.k.mu.Unlock()
	var free []string
	for _, id := range w.devs {
		used := false
		for _, p := range w.k.alloc {
			used = used || slices.Contains(p.ids, id)
		}
		if !used {
			free = append(free, id)
		}
	}
	if len(free) == 0 {
		return "", false
	}
	return free[w.rng.IntN(len(free))], true
}

func (w *world) step() {
	switch n := w.rng.IntN(100); {
	case n < 35:
		w.startPod(false)
	case n < 40:
		w.startPod(true)
	case n < 60:
		w.endPod()
	case n < 65:
		w.deleteJob()
	case n < 72:
		w.listDown = !w.listDown
		w.logf("kubelet List %s", map[bool]string{true: "fails", false: "answers"}[w.listDown])
		if w.listDown {
			w.k.setListErr(status.Error(codes.Unavailable, "kubelet down"))
		} else {
			w.k.setListErr(nil)
		}
	case n < 78:
		if w.notReady {
			w.logf("kubelet sources ready")
			w.k.sourcesReady()
		} else {
			w.logf("kubelet restarts")
			w.k.restart()
		}
		w.notReady = !w.notReady
	case n < 84:
		w.logf("agent restarts")
		w.start()
		if _, err := w.r.b.Reconcile(w.t.Context(), reconcileOptions{}); err != nil {
			w.fail("reconcile: %v", err)
		}
	default:
		w.logf("poll and sweep")
	}
	pollAndSweep(w.t, w.r, w.w)
}

// startPod starts a pod of a random job; with failBind, its NIC refuses
// the service and the bind rolls back.
func (w *world) startPod(failBind bool) {
	if w.notReady {
		return // the kubelet admits no pod before its sources are ready
	}
	id, ok := w.freeDevice()
	if !ok {
		return
	}
	job := w.jobs[w.rng.IntN(len(w.jobs))]
	w.nextPod++
	p := kubeletPod{"ns", fmt.Sprintf("%s-%d", job, w.nextPod), fmt.Sprintf("uid-%d", w.nextPod), "main", []string{id}}
	w.ns[p.uid] = 4026540000 + uint32(w.nextPod)
	w.jobByUID[p.uid] = "uid-of-" + job
	w.k.admit(p)
	nicName := w.r.b.devNIC[id]
	n := w.r.b.nics[nicName]
	if failBind {
		n.drv = failingCreate{n.drv}
	}
	err := w.r.b.PreStart(w.t.Context(), res, p.ids)
	if failBind {
		n.drv = n.drv.(failingCreate).serviceDriver
	}
	w.logf("start %s on %s (fail=%v): err=%v", p.name, id, failBind, err)
	switch {
	case err == nil && !failBind:
		w.live[p.uid] = p
	case err == nil:
		w.fail("bind of %s succeeded on a NIC that refuses services", p.name)
	case failBind || w.listDown:
		w.k.remove(p.uid) // the container never starts; the pod fails
	default:
		w.fail("bind of %s: %v", p.name, err)
	}
}

func (w *world) endPod() {
	if len(w.live) == 0 {
		return
	}
	uids := slices.Sorted(maps.Keys(w.live))
	uid := uids[w.rng.IntN(len(uids))]
	w.logf("pod %s exits", w.live[uid].name)
	delete(w.live, uid)
	w.k.remove(uid)
}

// deleteJob deletes a job: its pods end and its lease's owner is gone.
func (w *world) deleteJob() {
	i := w.rng.IntN(len(w.jobs))
	job := w.jobs[i]
	w.logf("job %s deleted", job)
	for uid, p := range w.live {
		if jobOf(p.name) == job {
			delete(w.live, uid)
			w.k.remove(uid)
		}
	}
	w.ctl.deleteJob("ns", job)
	w.jobs[i] = w.newJobName()
}

// check fails the test when an invariant does not hold.
func (w *world) check() {
	recorded := map[string]map[uint32]string{} // NIC → service ID → pod key
	for _, p := range w.r.b.store.Pods() {
		for _, s := range p.Services {
			if recorded[s.NIC] == nil {
				recorded[s.NIC] = map[uint32]string{}
			}
			recorded[s.NIC][s.ID] = p.Key()
		}
	}
	// No VNI in use without the node's hold on its job's lease: else the
	// controller may give it to another job.
	for _, nicName := range []string{"cxi0", "cxi1"} {
		for _, s := range w.r.services(w.t, nicName) {
			key, ok := recorded[nicName][s.ID]
			if !ok {
				w.fail("service %d on %s (VNIs %v) is recorded for no pod", s.ID, nicName, s.VNIs)
			}
			owner, held := w.ctl.owner(s.VNIs[0])
			if want := "job/ns/" + jobOf(key[len("ns/"):]); owner != want || !held {
				w.fail("service %d on %s of pod %s runs on VNI %d, which the controller gives to %q (held by the node: %v)",
					s.ID, nicName, key, s.VNIs[0], owner, held)
			}
		}
	}
	// No live pod without its service.
	for _, p := range w.live {
		rec, ok := w.r.b.store.Get("ns/" + p.name)
		nicName := w.r.b.devNIC[p.ids[0]]
		if !ok || !slices.ContainsFunc(rec.Services, func(s checkpoint.Service) bool { return s.NIC == nicName }) {
			w.fail("live pod %s has no service on %s (record %+v)", p.name, nicName, rec)
		}
	}
	// No service without a pod the kubelet still knows, once the kubelet
	// answers and the sweeps have run.
	if w.listDown || w.notReady {
		return
	}
	pollAndSweep(w.t, w.r, w.w)
	pollAndSweep(w.t, w.r, w.w)
	w.k.mu.Lock()
	defer w.k.mu.Unlock()
	for _, p := range w.r.b.store.Pods() {
		_, active := w.k.active[p.UID]
		_, alloc := w.k.alloc[p.UID]
		if !active && !alloc && len(p.Services) > 0 {
			w.fail("pod %s left the kubelet, but its services %v remain", p.Key(), p.Services)
		}
	}
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), joinLines(w.log))
}

// Issue 15, items 1 to 3: random interleavings of pod starts and exits,
// job deletions, failed binds, failed and empty kubelet Lists and agent
// restarts keep the invariants after every step: no VNI in use without
// its job's hold (so never held by two jobs), no live pod without its
// service, no service without a pod the kubelet still knows.
func TestItems1To3InvariantsUnderInterleavings(t *testing.T) {
	seeds, steps := 40, 60
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			w := newWorld(t, uint64(seed))
			for range steps {
				w.step()
				w.check()
			}
		})
	}
}

func joinLines(lines []string) string { return strings.Join(lines, "\n  ") }

package agent

import (
	"errors"
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
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/internal/optionstest"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// world is one node under random events: pods of a few jobs start and
// exit, jobs are deleted, binds fail, the kubelet's List fails or comes
// back empty after a restart, and the agent restarts. A share of the pods
// ask for service options (optionstest.RandomRequest), some of which their
// namespace may not have, and the NICs run out of pools and LEs. It
// checks the invariants of issue 15 (items 1 to 3), and those of the
// options, after every step.
type world struct {
	t    *testing.T
	rng  *rand.Rand
	dir  string
	cfg  config.Config // optionstest.Config
	r    *rig
	w    *podwatch.Watcher
	k    *fakeKubelet
	ctl  *jobController
	ns   fakeNetns
	devs []string // device IDs, over both NICs

	jobs        []jobRef                     // jobs pods start in; a deleted job is replaced
	nextJob     int                          // suffix of the next job name
	nextPod     int                          // suffix of the next pod and UID
	live        map[string]kubeletPod        // pods bound and not ended, by UID
	pods        map[string]*podModel         // every pod ever started, by UID
	byInode     map[uint32]string            // pod UID by its namespace's inode
	jobByUID    map[string]string            // each pod's Job's UID, as its sandbox's labels say
	annotations map[string]map[string]string // each pod's annotations, as its sandbox's say
	listDown    bool                         // List fails
	notReady    bool                         // the kubelet restarted; its sources are not ready
	// unexpected is a bind whose outcome the model did not predict,
	// reported after the driver's state is checked.
	unexpected string
	outcomes   map[string]int // binds by outcome, over all seeds
	log        []string
}

// jobRef is a job: its namespace and name.
type jobRef struct{ ns, name string }

// key is the job's lease key at the controller.
func (j jobRef) key() string { return "job/" + j.ns + "/" + j.name }

// podModel is what the test knows of a pod: its job, what it asked for and
// what the model says it gets.
type podModel struct {
	ns, name string
	job      jobRef
	req      jobreq.Request
	asked    bool
	want     optionstest.Want
}

func newWorld(t *testing.T, seed uint64, outcomes map[string]int) *world {
	cfg, err := config.Parse([]byte(optionstest.Config))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, seed)), dir: t.TempDir(), cfg: cfg, k: newFakeKubelet(t),
		ctl: newJobController(), ns: fakeNetns{}, live: map[string]kubeletPod{}, pods: map[string]*podModel{},
		byInode: map[uint32]string{}, jobByUID: map[string]string{}, annotations: map[string]map[string]string{},
		outcomes: outcomes}
	for range 3 {
		w.jobs = append(w.jobs, w.newJob())
	}
	w.start()
	// Other stacks' system services hold most LE pools, one to three
	// TLE pools and half the LEs or more, so that the pods run out of
	// them.
	for _, nicName := range []string{"cxi0", "cxi1"} {
		le, tle, les := 12+w.rng.IntN(2), 1+w.rng.IntN(3), uint16(8000+w.rng.IntN(4000))
		if err := optionstest.HoldPools(w.r.sims[nicName], le, tle, les); err != nil {
			t.Fatal(err)
		}
		w.logf("%s: system services hold %d LE pools, %d TLE pools and %d LEs", nicName, le, tle, les)
	}
	return w
}

// start builds the agent on the world's state directory, as at a start.
func (w *world) start() {
	w.r = newRig(w.t, w.dir, nil, w.ns)
	w.r.b.setPolicy(policyFrom(w.cfg))
	// The runtime names each pod's Job, so that a job's pods share its
	// lease on the node (engine.Leases.AcquireShared), and reports its
	// annotations, where its service options are.
	w.r.b.netns = metaNetns{fakeNetns: w.ns, job: w.jobByUID, annotations: w.annotations}
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

func (w *world) newJob() jobRef {
	w.nextJob++
	return jobRef{ns: optionstest.Namespaces[w.rng.IntN(len(optionstest.Namespaces))], name: fmt.Sprintf("job%d", w.nextJob)}
}

// freeDevice returns a device no pod the kubelet knows holds, on a NIC
// other than notOn ("" for any).
func (w *world) freeDevice(notOn string) (string, bool) {
	w.k.mu.Lock()
	defer w.k.mu.Unlock()
	var free []string
	for _, id := range w.devs {
		used := w.r.b.devNIC[id] == notOn
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

// startPod starts a pod of a random job, on one NIC or (a quarter of
// them) both; with failBind, one of its NICs refuses the service and the
// bind rolls back. A share of the pods ask for service options; the
// model (optionstest) says whether the policy refuses them, whether they
// fit on the NICs as the driver's services stand, and what they get.
func (w *world) startPod(failBind bool) {
	if w.notReady {
		return // the kubelet admits no pod before its sources are ready
	}
	id, ok := w.freeDevice("")
	if !ok {
		return
	}
	ids := []string{id}
	if w.rng.IntN(4) == 0 {
		if other, ok := w.freeDevice(w.r.b.devNIC[id]); ok {
			ids = append(ids, other)
		}
	}
	job := w.jobs[w.rng.IntN(len(w.jobs))]
	w.nextPod++
	p := kubeletPod{job.ns, fmt.Sprintf("%s-%d", job.name, w.nextPod), fmt.Sprintf("uid-%d", w.nextPod), "main", ids}
	m := &podModel{ns: p.ns, name: p.name, job: job}
	m.req, m.asked = optionstest.RandomRequest(w.rng)
	m.want = optionstest.Resolve(p.ns, m.req, m.asked)
	w.pods[p.uid] = m
	inode := 4026540000 + uint32(w.nextPod)
	w.ns[p.uid] = inode
	w.byInode[inode] = p.uid
	w.jobByUID[p.uid] = "uid-of-" + job.ns + "-" + job.name
	if m.asked {
		w.annotations[p.uid] = map[string]string{jobreq.Annotation: optionstest.JSON(m.req)}
	}
	// What the model expects: a refusal by the policy, or by the first
	// NIC (in NIC order) the services do not fit on.
	noRoom, noRoomOn := (*optionstest.NoRoom)(nil), ""
	for _, n := range w.nicsOf(ids) {
		if _, nr := m.want.On(w.nicState(n)); nr != nil && m.want.Refused == "" {
			noRoom, noRoomOn = nr, n
			break
		}
	}
	before := w.driverServices()
	w.k.admit(p)
	var n *nic
	if failBind {
		n = w.r.b.nics[w.r.b.devNIC[ids[w.rng.IntN(len(ids))]]]
		n.drv = failingCreate{n.drv}
	}
	err := w.r.b.PreStart(w.t.Context(), res, p.ids)
	if failBind {
		n.drv = n.drv.(failingCreate).serviceDriver
	}
	w.logf("start %s/%s on %v (fail=%v) asking %s: err=%v", p.ns, p.name, ids, failBind, w.asked(m), err)
	var fitErr *cxi.FitError
	switch {
	case err == nil && failBind:
		w.fail("bind of %s succeeded on a NIC that refuses services", p.name)
	case err == nil && m.want.Refused != "":
		w.unexpectedf("bind of %s/%s succeeded, but the policy refuses what it asked (%s): %s", p.ns, p.name, w.asked(m), m.want.Refused)
	case err == nil && noRoom != nil:
		w.unexpectedf("bind of %s/%s succeeded, but by the driver's services it does not fit on %s: %s", p.ns, p.name, noRoomOn, noRoom)
	case err == nil:
		w.live[p.uid] = p
		w.outcomes[map[bool]string{false: "bound, no options", true: "bound with options"}[m.asked]]++
	case failBind || w.listDown:
		w.outcomes["failed: a NIC refusing, or List down"]++
	case m.want.Refused != "":
		if !errors.Is(err, jobpolicy.ErrRefused) {
			w.unexpectedf("bind of %s/%s: %v; want the policy's refusal: %s", p.ns, p.name, err, m.want.Refused)
		}
		w.outcomes["refused by the policy"]++
	case noRoom != nil:
		if !errors.As(err, &fitErr) || fitErr.Resource != noRoom.Resource || fitErr.Pool != noRoom.Pool {
			w.unexpectedf("bind of %s/%s: %v; want it refused on %s: %s", p.ns, p.name, err, noRoomOn, noRoom)
		}
		w.outcomes["refused: "+noRoom.String()]++
	default:
		w.fail("bind of %s/%s: %v", p.ns, p.name, err)
	}
	if err != nil {
		w.k.remove(p.uid) // the container never starts; the pod fails
		w.checkRefusedLeftNothing(m, inode, before)
	}
}

// asked describes what a pod asked for, for the log.
func (w *world) asked(m *podModel) string {
	if !m.asked {
		return "nothing"
	}
	return optionstest.JSON(m.req)
}

func (w *world) unexpectedf(format string, args ...any) {
	if w.unexpected == "" {
		w.unexpected = fmt.Sprintf(format, args...)
	}
}

// nicsOf are the NICs of device IDs, in NIC order.
func (w *world) nicsOf(ids []string) []string {
	var out []string
	for _, id := range ids {
		if n := w.r.b.devNIC[id]; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// simServices lists every service of a simulated NIC, as the driver
// holds them.
func (w *world) simServices(nicName string) []sim.Service {
	w.t.Helper()
	svcs, err := w.r.sims[nicName].Services()
	if err != nil {
		w.t.Fatal(err)
	}
	return svcs
}

func (w *world) nicState(nicName string) optionstest.NIC {
	return optionstest.NICOf(w.simServices(nicName))
}

// driverServices are the IDs of every service on the NICs, by NIC.
func (w *world) driverServices() map[string][]uint32 {
	w.t.Helper()
	ids, err := optionstest.ServiceIDs(w.r.sims)
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

// checkRefusedLeftNothing fails the test unless a pod whose bind failed
// left no service (the driver's services are those before the bind, none
// admits its namespace), no record, and no hold on its job's lease that
// no other pod's record accounts for.
func (w *world) checkRefusedLeftNothing(m *podModel, inode uint32, before map[string][]uint32) {
	w.t.Helper()
	after := w.driverServices()
	for _, nicName := range []string{"cxi0", "cxi1"} {
		if !slices.Equal(before[nicName], after[nicName]) {
			w.fail("refused pod %s/%s left services behind on %s: %v before its bind, %v after", m.ns, m.name, nicName, before[nicName], after[nicName])
		}
		for _, s := range w.simServices(nicName) {
			if slices.Contains(s.NetNS, inode) {
				w.fail("refused pod %s/%s left service %d on %s admitting its namespace", m.ns, m.name, s.Desc.SvcID, nicName)
			}
		}
	}
	if rec, ok := w.r.b.store.Get(m.ns + "/" + m.name); ok {
		w.fail("refused pod %s/%s left its record %+v", m.ns, m.name, rec)
	}
	key := m.job.key()
	if slices.ContainsFunc(w.r.b.store.Pods(), func(p checkpoint.Pod) bool { return p.LeaseKey == key }) {
		return // another pod of the job holds the lease
	}
	if _, held := w.ctl.leaseOf(key); held {
		w.fail("refused pod %s/%s left the node holding its job's lease %s, which no pod's record accounts for", m.ns, m.name, key)
	}
}

func (w *world) endPod() {
	if len(w.live) == 0 {
		return
	}
	uids := slices.Sorted(maps.Keys(w.live))
	uid := uids[w.rng.IntN(len(uids))]
	w.logf("pod %s/%s exits", w.live[uid].ns, w.live[uid].name)
	delete(w.live, uid)
	w.k.remove(uid)
}

// deleteJob deletes a job: its pods end and its lease's owner is gone.
func (w *world) deleteJob() {
	i := w.rng.IntN(len(w.jobs))
	job := w.jobs[i]
	w.logf("job %s/%s deleted", job.ns, job.name)
	for uid, p := range w.live {
		if p.ns == job.ns && jobOf(p.name) == job.name {
			delete(w.live, uid)
			w.k.remove(uid)
		}
	}
	w.ctl.deleteJob(job.ns, job.name)
	w.jobs[i] = w.newJob()
}

// check fails the test when an invariant does not hold.
func (w *world) check() {
	// The driver's services first: what they carry and hold.
	w.checkOptions()
	if w.unexpected != "" {
		w.fail("%s", w.unexpected)
	}
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
			ns, name, _ := strings.Cut(key, "/")
			owner, held := w.ctl.owner(s.VNIs[0])
			if want := (jobRef{ns, jobOf(name)}).key(); owner != want || !held {
				w.fail("service %d on %s of pod %s runs on VNI %d, which the controller gives to %q (held by the node: %v)",
					s.ID, nicName, key, s.VNIs[0], owner, held)
			}
		}
	}
	// No live pod without its service, on each of its NICs.
	for _, p := range w.live {
		rec, ok := w.r.b.store.Get(p.ns + "/" + p.name)
		for _, nicName := range w.nicsOf(p.ids) {
			if !ok || !slices.ContainsFunc(rec.Services, func(s checkpoint.Service) bool { return s.NIC == nicName }) {
				w.fail("live pod %s/%s has no service on %s (record %+v)", p.ns, p.name, nicName, rec)
			}
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

// checkOptions checks, from the simulated driver's services, the
// invariants of service options: no NIC holds more pools than it has or
// more of a resource than it has; every service the agent made admits
// one pod's namespace, carries that pod's job's VNI first (the one the
// controller leases the job) and then exactly the named VNIs the pod
// asked for and its namespace may join; no job's VNI is carried by
// another job's services; and each service's traffic classes and limits
// are what the model makes of the pod's request.
func (w *world) checkOptions() {
	w.t.Helper()
	jobOfVNI := map[uint16]string{}
	for _, nicName := range []string{"cxi0", "cxi1"} {
		all := w.simServices(nicName)
		for _, bad := range optionstest.CheckNIC(all) {
			w.fail("%s: %s", nicName, bad)
		}
		n := optionstest.NICOf(all)
		for _, s := range all {
			if s.Desc.SvcID == cxi.DefaultServiceID || s.Desc.IsSystemSvc {
				continue
			}
			id := s.Desc.SvcID
			if len(s.NetNS) != 1 || s.Open || len(s.UIDs)+len(s.GIDs) > 0 {
				w.fail("service %d on %s admits %+v, want one pod's namespace", id, nicName, s)
			}
			uid, ok := w.byInode[s.NetNS[0]]
			if !ok {
				w.fail("service %d on %s admits namespace %d, no pod's", id, nicName, s.NetNS[0])
			}
			m := w.pods[uid]
			vnis := s.Desc.ValidVNIs()
			key := m.job.key()
			if len(vnis) == 0 {
				w.fail("service %d on %s of pod %s/%s carries no VNI", id, nicName, m.ns, m.name)
			}
			if other, ok := jobOfVNI[vnis[0]]; ok && other != key {
				w.fail("VNI %d is the job VNI of services of both %s and %s", vnis[0], other, key)
			}
			jobOfVNI[vnis[0]] = key
			jobVNI, held := w.ctl.leaseOf(key)
			if !held {
				w.fail("service %d on %s of pod %s/%s carries VNIs %v, but the node holds no lease of its job %s", id, nicName, m.ns, m.name, vnis, key)
			}
			for _, bad := range m.want.Check(s, jobVNI, n) {
				w.fail("service %d on %s of pod %s/%s (asked %s): %s", id, nicName, m.ns, m.name, w.asked(m), bad)
			}
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
//
// A share of the pods ask for service options, and after every step the
// driver's services are what the options ask for (after the policy), no
// NIC holds more pools or resources than it has, no VNI is carried but
// its job's and the named ones its pod may join, and a refused pod left
// nothing behind.
func TestItems1To3InvariantsUnderInterleavings(t *testing.T) {
	seeds, steps := 40, 60
	if testing.Short() {
		seeds = 10
	}
	outcomes, ran := map[string]int{}, 0
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			ran++
			w := newWorld(t, uint64(seed), outcomes)
			for range steps {
				w.step()
				w.check()
			}
		})
	}
	t.Logf("binds by outcome: %v", outcomes)
	if ran >= 40 && !t.Failed() {
		// The seeds reach every refusal the options can meet.
		for _, want := range []string{"bound with options", "refused by the policy", "refused: no LEs pool left", "refused: no TLEs pool left", "refused: not enough LEs"} {
			if outcomes[want] == 0 {
				t.Errorf("no bind %s over %d seeds: %v", want, ran, outcomes)
			}
		}
	}
}

func joinLines(lines []string) string { return strings.Join(lines, "\n  ") }

// leaseOf returns the VNI of the lease key and whether the node holds it.
func (c *jobController) leaseOf(key string) (vni uint16, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leases[key]; l != nil {
		return l.vni, l.held
	}
	return 0, false
}

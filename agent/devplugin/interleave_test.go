package devplugin

import (
	"errors"
	"flag"
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

var (
	interleaveSeeds = flag.Int("interleave.seeds", 40, "seeds of TestItems1To3InvariantsUnderInterleavings")
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

	jobs    []jobRef              // jobs pods start in; a deleted job is replaced
	nextJob int                   // suffix of the next job name
	nextPod int                   // suffix of the next pod and UID
	live    map[string]kubeletPod // pods bound and not ended, by UID
	pods    map[string]*podModel  // every pod ever started, by UID
	// The model of the pods' network namespaces, kept apart from the
	// agent's: byInode names the pod whose namespace has that inode now
	// (while its sandbox runs, and after its end until the agent, which
	// may hold it, next stops); cur is the reverse. Inodes are handed out
	// fresh while the agent runs (the model does not see its handles),
	// and lowest-free-first when sandboxes are made again while it is
	// down, so that a pod's new namespace may get another pod's old inode.
	byInode     map[uint32]string
	cur         map[string]uint32
	ended       map[string]bool              // pods ended whose namespace may linger, held by the agent
	hostNS      map[uint32]bool              // namespaces of host processes, made after a reboot
	maxInode    uint32                       // highest inode ever handed out
	restarts    map[string]bool              // live pods whose containers must start again (PreStart)
	sysPools    map[string][3]int            // what each NIC's system services hold, for HoldPools after a reload
	system      map[string]int               // each NIC's system services, as the driver lists them
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
		byInode: map[uint32]string{}, cur: map[string]uint32{}, ended: map[string]bool{}, hostNS: map[uint32]bool{},
		maxInode: 4026540000, restarts: map[string]bool{}, sysPools: map[string][3]int{}, system: map[string]int{}, jobByUID: map[string]string{}, annotations: map[string]map[string]string{},
		outcomes: outcomes}
	for range 3 {
		w.jobs = append(w.jobs, w.newJob())
	}
	w.start()
	// Other stacks' system services hold most LE pools, one to three
	// TLE pools and half the LEs or more, so that the pods run out of
	// them.
	for _, nicName := range []string{"cxi0", "cxi1"} {
		le, tle, les := 12+w.rng.IntN(2), 1+w.rng.IntN(3), 8000+w.rng.IntN(4000)
		w.sysPools[nicName] = [3]int{le, tle, les}
		w.holdPools(nicName)
	}
	return w
}

// holdPools makes the NIC's system services, as other stacks do at boot.
func (w *world) holdPools(nicName string) {
	p := w.sysPools[nicName]
	if err := optionstest.HoldPools(w.r.sims[nicName], p[0], p[1], uint16(p[2])); err != nil {
		w.t.Fatal(err)
	}
	w.system[nicName] = optionstest.SystemServices(w.simServices(nicName))
	w.logf("%s: system services hold %d LE pools, %d TLE pools and %d LEs", nicName, p[0], p[1], p[2])
}

// start builds the agent on the world's state directory, as at a start.
func (w *world) start() {
	w.r = newRig(w.t, w.dir, nil, w.ns)
	w.r.useConfig(w.t, w.cfg)
	// The runtime names each pod's Job, so that a job's pods share its
	// lease on the node (engine.Leases.AcquireShared), and reports its
	// annotations, where its service options are.
	w.r.b.netns = metaNetns{fakeNetns: w.ns, job: w.jobByUID, annotations: w.annotations}
	w.r.b.logger = testLoggerDiscard()
	w.r.useLeaser(w.t, w.ctl)
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
		w.stopAgent()
		w.startAgent()
	case n < 88:
		w.sandboxesMadeAgain()
	case n < 90:
		w.logf("driver reloaded while the agent is down")
		w.stopAgent()
		w.reloadDriver()
		w.startAgent()
	default:
		w.logf("poll and sweep")
		w.containersStart()
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
	inode := w.freshInode()
	w.setNamespace(p.uid, inode)
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
	var failing string
	if failBind {
		failing = w.r.b.devNIC[ids[w.rng.IntN(len(ids))]]
		w.r.drvs[failing] = failingCreate{w.r.drvs[failing]}
	}
	err := w.r.b.PreStart(w.t.Context(), res, p.ids)
	if failBind {
		w.r.drvs[failing] = w.r.drvs[failing].(failingCreate).Driver
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
		w.podEnded(p.uid)
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
	if rec, ok := w.r.store.Get(m.ns + "/" + m.name); ok {
		w.fail("refused pod %s/%s left its record %+v", m.ns, m.name, rec)
	}
	key := m.job.key()
	if slices.ContainsFunc(w.r.store.Holders(checkpoint.KindPod), func(p checkpoint.Holder) bool { return p.LeaseKey == key }) {
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
	w.podEnded(uid)
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
			w.podEnded(uid)
		}
	}
	w.ctl.deleteJob(job.ns, job.name)
	w.jobs[i] = w.newJob()
}

// check fails the test when an invariant does not hold.
func (w *world) check() {
	// The driver's services first: whom they admit, what they carry and
	// hold.
	w.checkAdmitsCurrent()
	w.checkOptions()
	if w.unexpected != "" {
		w.fail("%s", w.unexpected)
	}
	recorded := map[string]map[uint32]string{} // NIC → service ID → pod key
	for _, p := range w.r.store.Holders(checkpoint.KindPod) {
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
		rec, ok := w.r.store.Get(p.ns + "/" + p.name)
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
	for _, p := range w.r.store.Holders(checkpoint.KindPod) {
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
	holders := w.holders()
	jobOfVNI := map[uint16]string{}
	for _, nicName := range []string{"cxi0", "cxi1"} {
		all := w.simServices(nicName)
		for _, bad := range optionstest.CheckNIC(all) {
			w.fail("%s: %s", nicName, bad)
		}
		if n, want := optionstest.SystemServices(all), w.system[nicName]; n != want {
			w.fail("%s has %d system services, want %d: the agent destroyed another stack's service", nicName, n, want)
		}
		n := optionstest.NICOf(all)
		for _, s := range all {
			if s.Desc.SvcID == cxi.DefaultServiceID || s.Desc.IsSystemSvc {
				continue
			}
			id := s.Desc.SvcID
			var uid string
			switch {
			case unbound(s):
				// Made unbound by a start that could not verify its pod's
				// namespace: its pod is the one that records it.
				p, ok := holders[nicName][id]
				if !ok {
					w.fail("unbound service %d on %s is recorded for no pod", id, nicName)
				}
				uid = p.UID
			case len(s.NetNS) != 1 || s.Open || len(s.UIDs)+len(s.GIDs) > 0:
				w.fail("service %d on %s admits %+v, want one pod's namespace", id, nicName, s)
			default:
				var ok bool
				if uid, ok = w.byInode[s.NetNS[0]]; !ok {
					w.fail("service %d on %s admits namespace %d, no pod's", id, nicName, s.NetNS[0])
				}
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

// holders are the pods that record each service, by NIC and service ID.
func (w *world) holders() map[string]map[uint32]checkpoint.Holder {
	out := map[string]map[uint32]checkpoint.Holder{}
	for _, p := range w.r.store.Holders(checkpoint.KindPod) {
		for _, s := range p.Services {
			if out[s.NIC] == nil {
				out[s.NIC] = map[uint32]checkpoint.Holder{}
			}
			out[s.NIC][s.ID] = p
		}
	}
	return out
}

// unbound reports whether the driver holds s unbound: disabled, admitting
// nobody.
func unbound(s sim.Service) bool {
	return !s.Desc.Enable && !s.Open && len(s.NetNS)+len(s.UIDs)+len(s.GIDs) == 0
}

// checkAdmitsCurrent checks issue 32's invariant from the driver's
// services and the model's namespaces: no service admits a namespace that
// is not its holder's current one. Every namespace member of a service
// (enabled or not: the driver cannot take one back) is the namespace the
// model gives the pod that records the service, now (a pod that ended
// keeps its namespace until the agent, which may hold it, stops). An
// unbound service is fine.
func (w *world) checkAdmitsCurrent() {
	w.t.Helper()
	holders := w.holders()
	for _, nicName := range []string{"cxi0", "cxi1"} {
		for _, s := range w.simServices(nicName) {
			if s.Desc.SvcID == cxi.DefaultServiceID || s.Desc.IsSystemSvc || len(s.NetNS) == 0 {
				continue
			}
			id := s.Desc.SvcID
			p, ok := holders[nicName][id]
			if !ok {
				w.fail("service %d on %s admits namespaces %v and no pod records it", id, nicName, s.NetNS)
			}
			for _, ino := range s.NetNS {
				if w.byInode[ino] == p.UID && w.cur[p.UID] == ino {
					continue
				}
				now := "no pod's: nothing has it now, and the kernel may give it to the next namespace made"
				switch owner, ok := w.byInode[ino]; {
				case ok:
					now = fmt.Sprintf("now the namespace of pod %s/%s", w.pods[owner].ns, w.pods[owner].name)
				case w.hostNS[ino]:
					now = "now a host process's namespace"
				}
				cur := "none (its namespace is gone)"
				if c, ok := w.cur[p.UID]; ok {
					cur = fmt.Sprint(c)
				}
				w.fail("service %d on %s (enabled %v) of pod %s admits namespace %d, %s; the pod's namespace is %s",
					id, nicName, s.Desc.Enable, p.Key(), ino, now, cur)
			}
		}
	}
}

// freshInode is an inode never handed out before.
func (w *world) freshInode() uint32 {
	w.maxInode++
	return w.maxInode
}

// lowestFree is the inode the kernel hands the next namespace: the lowest
// for which inUse is false.
func (w *world) lowestFree(inUse func(uint32) bool) uint32 {
	ino := optionstest.Inodes{Base: 4026540000}.Next(inUse)
	w.maxInode = max(w.maxInode, ino)
	return ino
}

// setNamespace gives pod uid's sandbox the namespace of inode: the runtime
// names it for the pod from now on.
func (w *world) setNamespace(uid string, inode uint32) {
	w.ns[uid] = inode
	w.cur[uid] = inode
	w.byInode[inode] = uid
}

// podEnded is the end of pod uid's sandbox: the runtime no longer names
// its namespace, which lingers while the agent may hold it.
func (w *world) podEnded(uid string) {
	delete(w.ns, uid)
	delete(w.restarts, uid)
	w.ended[uid] = true
}

// stopAgent is the agent's process ending: the namespaces it alone held,
// those of pods ended, are gone, and their inodes free.
func (w *world) stopAgent() {
	for uid := range w.ended {
		delete(w.byInode, w.cur[uid])
		delete(w.cur, uid)
	}
	clear(w.ended)
}

// startAgent is the agent starting on the world's state: the start-up
// reconcile.
func (w *world) startAgent() {
	w.start()
	rep, err := w.r.b.Reconcile(w.t.Context(), ReconcileOptions{})
	if err != nil {
		w.fail("reconcile: %v", err)
	}
	w.logf("agent started: %+v", rep)
}

// reloadDriver is a driver reload: every service goes but the default
// and the Ethernet service, and other stacks make their system services
// again, on the lowest free IDs.
func (w *world) reloadDriver() {
	for _, nicName := range []string{"cxi0", "cxi1"} {
		gone, err := optionstest.ReloadDriver(w.r.sims[nicName])
		if err != nil {
			w.t.Fatal(err)
		}
		w.logf("%s: driver reloaded, services %v gone", nicName, gone)
		w.holdPools(nicName)
	}
}

// sandboxesMadeAgain: while the agent is down, the node reboots (every
// live pod's sandbox is made again, and half the time the driver is
// reloaded too) or some pods' sandboxes are made again. Each new
// namespace gets the lowest free inode, in the order the sandboxes are
// made: half the time only the remade pods' old inodes are free (the
// host's other namespaces hold the rest), so that they are permuted among
// the pods; otherwise the lowest free over every inode, which may be an
// ended pod's. A quarter of the time a host process makes a namespace
// first. Then the agent starts, and the pods' containers start again.
func (w *world) sandboxesMadeAgain() {
	uids := slices.Sorted(maps.Keys(w.live))
	if len(uids) == 0 {
		return
	}
	reboot := w.rng.IntN(2) == 0
	w.rng.Shuffle(len(uids), func(i, j int) { uids[i], uids[j] = uids[j], uids[i] })
	if !reboot {
		uids = uids[:1+w.rng.IntN(len(uids))]
	}
	w.stopAgent()
	if reboot {
		clear(w.hostNS)
	}
	var pool []uint32 // the remade pods' old inodes
	for _, uid := range uids {
		pool = append(pool, w.cur[uid])
		delete(w.byInode, w.cur[uid])
		delete(w.cur, uid)
		delete(w.ns, uid)
	}
	restricted := w.rng.IntN(2) == 0
	inUse := func(ino uint32) bool {
		_, pod := w.byInode[ino]
		return pod || w.hostNS[ino] || restricted && !slices.Contains(pool, ino)
	}
	host := ""
	if w.rng.IntN(4) == 0 {
		if restricted {
			pool = append(pool, w.freshInode())
		}
		ino := w.lowestFree(inUse)
		w.hostNS[ino] = true
		host = fmt.Sprintf(", a host process's first (%d)", ino)
	}
	var made []string
	for _, uid := range uids {
		old := pool[slices.Index(uids, uid)]
		ino := w.lowestFree(inUse)
		w.setNamespace(uid, ino)
		w.restarts[uid] = true
		made = append(made, fmt.Sprintf("%s/%s %d→%d", w.pods[uid].ns, w.pods[uid].name, old, ino))
	}
	what := "sandboxes made again while the agent is down"
	if reboot {
		what = "node reboots"
	}
	w.logf("%s (lowest free among old inodes only: %v)%s: %v", what, restricted, host, made)
	if reboot && w.rng.IntN(2) == 0 {
		w.reloadDriver()
	}
	w.startAgent()
	w.containersStart()
}

// containersStart starts again the containers of pods whose sandbox was
// made again (PreStart); one that fails is retried later, as the kubelet
// does.
func (w *world) containersStart() {
	for _, uid := range slices.Sorted(maps.Keys(w.restarts)) {
		p, ok := w.live[uid]
		if !ok {
			delete(w.restarts, uid)
			continue
		}
		err := w.r.b.PreStart(w.t.Context(), res, p.ids)
		w.logf("container of %s/%s starts again: %v", p.ns, p.name, err)
		if err == nil {
			delete(w.restarts, uid)
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
	seeds, steps := *interleaveSeeds, 60
	if testing.Short() {
		seeds = min(seeds, 10)
	}
	outcomes, ran := map[string]int{}, 0
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			ran++ // a skipped seed counts: the outcomes are over the others
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

package dra

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/internal/optionstest"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

var (
	interleaveSeeds = flag.Int("interleave.seeds", 30, "seeds of TestDRAInvariantsUnderInterleavings (make fuzz runs more)")
)

// liveNamespaces are the network namespaces that exist: a sandbox's from
// its start to its end (live), and any while a handle holds it. A
// sandbox's namespace is reached by its path, the runtime's bind mount,
// which goes with the sandbox; opening a path that is not mounted fails
// as the kernel does (no such file). A new namespace gets the lowest free
// inode, so an inode a service still names may be another's next.
type liveNamespaces struct {
	live  map[uint32]bool
	held  map[uint32]int    // open handles
	paths map[string]uint32 // mounted paths
}

// exists reports whether the namespace of inode exists.
func (l *liveNamespaces) exists(inode uint32) bool { return l.live[inode] || l.held[inode] > 0 }

// make is a new namespace, with the lowest free inode, mounted at path
// (none: "").
func (l *liveNamespaces) make(path string) uint32 {
	inode := optionstest.Inodes{Base: 4026540000}.Next(l.exists)
	l.live[inode] = true
	if path != "" {
		l.paths[path] = inode
	}
	return inode
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
	inode, ok := l.paths[path]
	if !ok || !l.exists(inode) {
		return nil, fmt.Errorf("open network namespace %s: %w", path, fs.ErrNotExist)
	}
	l.held[inode]++
	return &trackedNetns{w: l, inode: inode}, nil
}

// draWorld is one node in DRA mode under random events: claims prepared
// and unprepared, sandboxes started (some binds failing on the second
// NIC), pods exiting, a second pod trying a shared claim, NRI going down
// and up, agent restarts, the kubelet losing its claim state, and the
// collector's passes. A share of the claims ask for service options
// (optionstest.RandomRequest) in their serviceOptions, some of which
// their namespace may not have, and the NICs run out of pools and LEs.
// It checks the invariants after every step.
type draWorld struct {
	t     *testing.T
	rng   *rand.Rand
	r     *rig
	flaky *flakyBind
	nri   *nriConn
	ns    *liveNamespaces
	api   *fakeClaims
	col   *Collector
	now   time.Time

	claims    map[string]*resourceapi.ResourceClaim // the kubelet's prepared claims, by UID
	models    map[string]*claimModel                // every claim ever prepared, by UID
	podNS     map[string]string                     // each pod's namespace, by pod name
	sandboxes map[string]uint32                     // running pods' namespaces, by pod name
	paths     map[string]string                     // running pods' namespace paths, by pod name
	last      map[string]uint32                     // each pod's last namespace, by pod name
	next      int
	nextPath  int
	sysPools  map[string][3]int // what each NIC's system services hold, for HoldPools after a reload
	system    map[string]int    // each NIC's system services, as the driver lists them
	// unexpected is a Prepare whose outcome the model did not predict,
	// reported after the driver's state is checked.
	unexpected string
	outcomes   map[string]int // Prepares by outcome, over all seeds
	log        []string
}

// claimModel is what the test knows of a claim: its pod, what it asked
// for and what the model says it gets.
type claimModel struct {
	ns, pod string
	req     jobreq.Request
	asked   bool
	want    optionstest.Want
}

// jobKey is the lease key of the claim's pod's job (fakeLeaser).
func (m *claimModel) jobKey() string {
	job := m.pod
	if i := strings.LastIndex(job, "-"); i > 0 {
		job = job[:i]
	}
	return "job/" + m.ns + "/" + job
}

func (m *claimModel) asks() string {
	if !m.asked {
		return "nothing"
	}
	return optionstest.JSON(m.req)
}

func newDRAWorld(t *testing.T, seed uint64, outcomes map[string]int) *draWorld {
	w := &draWorld{t: t, rng: rand.New(rand.NewPCG(seed, 7)), r: newRig(t), ns: &liveNamespaces{live: map[uint32]bool{}, held: map[uint32]int{}, paths: map[string]uint32{}},
		api: &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{}}, now: time.Now(),
		claims: map[string]*resourceapi.ResourceClaim{}, models: map[string]*claimModel{}, podNS: map[string]string{},
		sandboxes: map[string]uint32{}, paths: map[string]string{}, last: map[string]uint32{},
		sysPools: map[string][3]int{}, system: map[string]int{}, outcomes: outcomes}
	cfg, err := config.Parse([]byte(optionstest.Config))
	if err != nil {
		t.Fatal(err)
	}
	jobs := jobpolicy.New(cfg)
	w.r.cfg.Jobs = func() *jobpolicy.Policy { return jobs }
	w.r.defaults = engine.Defaults{TCs: cxi.DefaultTrafficClasses, Adjust: cfg.JobOptions.Adjust()}
	// Other stacks' system services hold most LE pools, one to three
	// TLE pools and half the LEs or more, so that the claims run out of
	// them.
	for _, nic := range []string{"cxi0", "cxi1"} {
		le, tle, les := 11+w.rng.IntN(3), 1+w.rng.IntN(3), 10000+w.rng.IntN(3000)
		w.sysPools[nic] = [3]int{le, tle, les}
		w.holdPools(nic)
	}
	w.flaky = &flakyBind{Driver: w.r.drv["cxi1"]}
	w.r.drv["cxi1"] = w.flaky
	w.nri = &nriConn{}
	w.nri.set(true, nil)
	w.r.cfg.BindReady = w.nri.Ready
	w.r.cfg.OpenNetns = w.ns.open
	w.restart()
	return w
}

// holdPools makes the NIC's system services, as other stacks do at boot.
func (w *draWorld) holdPools(nic string) {
	p := w.sysPools[nic]
	if err := optionstest.HoldPools(w.r.sims[nic], p[0], p[1], uint16(p[2])); err != nil {
		w.t.Fatal(err)
	}
	w.system[nic] = optionstest.SystemServices(w.simServices(nic))
	w.logf("%s: system services hold %d LE pools, %d TLE pools and %d LEs", nic, p[0], p[1], p[2])
}

// sandbox is the running sandbox of pod, in its namespace, with its
// network namespace's path.
func (w *draWorld) sandbox(pod string) Sandbox {
	sb := sandbox(pod, w.sandboxes[pod])
	sb.NetnsPath = w.paths[pod]
	if ns, ok := w.podNS[pod]; ok {
		sb.Namespace = ns
	}
	return sb
}

// startSandbox makes pod's sandbox: a new namespace, at path, that the
// runtime then binds through NRI if it is up (cxi1 failing the bind with
// fail). A sandbox whose bind fails is torn down.
func (w *draWorld) startSandbox(ctx context.Context, pod, path string, fail bool) error {
	inode := w.ns.make(path)
	w.sandboxes[pod], w.paths[pod], w.last[pod] = inode, path, inode
	w.flaky.fail = fail
	err := error(nil)
	if w.nri.Ready() == nil {
		err = w.r.m.Bind(ctx, w.sandbox(pod))
	}
	w.flaky.fail = false
	w.logf("sandbox %s netns %d at %s (nri up %v): %v", pod, inode, path, w.nri.Ready() == nil, err)
	if err != nil {
		w.stopPod(pod) // the runtime tears the sandbox down
	}
	return err
}

// newPath is a path for a new sandbox's namespace, as containerd names
// them.
func (w *draWorld) newPath() string {
	w.nextPath++
	return fmt.Sprintf("/var/run/netns/cni-%d", w.nextPath)
}

// restart is a new agent process on the same state: the namespaces the
// old one held are closed with it.
func (w *draWorld) restart() {
	w.stopAgent()
	w.startAgent()
}

// stopAgent ends the agent's process: the namespaces it held are closed.
func (w *draWorld) stopAgent() {
	if w.r.m != nil {
		w.r.m.eng.Namespaces().CloseAll()
	}
}

// startAgent starts the agent on the same state: the start-up reconcile,
// and, with NRI up, the runtime's list of the sandboxes running.
func (w *draWorld) startAgent() {
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
	for pod := range w.sandboxes {
		sbs = append(sbs, w.sandbox(pod))
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
	switch op := w.rng.IntN(12); op {
	case 0, 1: // the kubelet prepares a new pod's claim
		w.prepare(ctx)
	case 2, 3: // a prepared claim's pod starts its sandbox, maybe failing on cxi1
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		pod := w.podOf(uid)
		if _, running := w.sandboxes[pod]; running {
			return
		}
		if err := w.startSandbox(ctx, pod, w.newPath(), w.rng.IntN(3) == 0); err != nil {
			return
		}
		if w.nri.Ready() == nil {
			if _, err := w.r.m.Check(ctx, w.sandbox(pod), nil); err != nil {
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
		rec, ok := w.r.get(uid)
		if !ok || rec.BoundPod == "" {
			return
		}
		path := w.newPath()
		inode := w.ns.make(path)
		second := sandbox("intruder-0", inode)
		second.NetnsPath = path
		_, err := w.r.m.Check(ctx, second, w.r.m.env(rec))
		delete(w.ns.live, inode)
		delete(w.ns.paths, path)
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
	case 9: // the node reboots, or sandboxes are made again, while the agent is down
		w.sandboxesMadeAgain(ctx)
	case 10: // half the time, the driver is reloaded while the agent is down
		if w.rng.IntN(2) == 0 {
			w.collect(ctx)
			return
		}
		w.logf("driver reloaded while the agent is down")
		w.stopAgent()
		w.reloadDriver()
		w.startAgent()
	case 8: // the kubelet loses its state of a claim; its pod ends, the claim goes
		uid := w.pick(w.claims)
		if uid == "" {
			return
		}
		w.stopPod(w.podOf(uid))
		w.forget(uid)
		w.logf("kubelet lost %s", uid)
	default:
		w.collect(ctx)
	}
}

// collect: time passes; the collector runs.
func (w *draWorld) collect(ctx context.Context) {
	w.now = w.now.Add(40 * time.Second)
	rep, err := w.col.Pass(ctx)
	w.logf("collector pass: %+v %v", rep, err)
}

// prepare has the kubelet prepare a new pod's claim, of a random job and
// namespace, on one NIC or both; a share ask for service options. The
// model (optionstest) says whether the policy refuses them, whether they
// fit on the NICs as the driver's services stand, and what they get.
func (w *draWorld) prepare(ctx context.Context) {
	w.next++
	uid := fmt.Sprintf("c%d", w.next)
	m := &claimModel{ns: optionstest.Namespaces[w.rng.IntN(len(optionstest.Namespaces))], pod: fmt.Sprintf("job%d-%d", w.rng.IntN(3), w.next)}
	nics := [][]string{{"cxi0"}, {"cxi1"}, {"cxi0", "cxi1"}}[w.rng.IntN(3)]
	m.req, m.asked = optionstest.RandomRequest(w.rng)
	m.want = optionstest.Resolve(m.ns, m.req, m.asked)
	var opaque string
	if m.asked {
		opaque = `{"apiVersion":"` + ConfigAPIVersion + `","kind":"` + ConfigKind + `","serviceOptions":` + optionstest.JSON(m.req) + `}`
	}
	c := claim(uid, m.pod, opaque, nics...)
	c.Namespace = m.ns
	w.models[uid] = m
	w.podNS[m.pod] = m.ns
	// What the model expects: a refusal by the policy, or by the first
	// NIC (in allocation order) the services do not fit on.
	noRoom, noRoomOn := (*optionstest.NoRoom)(nil), ""
	for _, nic := range nics {
		if _, nr := m.want.On(optionstest.NICOf(w.simServices(nic))); nr != nil && m.want.Refused == "" {
			noRoom, noRoomOn = nr, nic
			break
		}
	}
	nriUp := w.nri.Ready() == nil
	before := w.driverServices()
	_, err := w.r.m.Prepare(ctx, c)
	w.logf("prepare %s for %s/%s on %v asking %s: %v", uid, m.ns, m.pod, nics, m.asks(), err)
	var fitErr *cxi.FitError
	switch {
	case err == nil && !nriUp:
		w.fail("claim %s prepared while NRI is down", uid)
	case err == nil && m.want.Refused != "":
		w.unexpectedf("prepare of %s (%s/%s) succeeded, but the policy refuses what it asked (%s): %s", uid, m.ns, m.pod, m.asks(), m.want.Refused)
	case err == nil && noRoom != nil:
		w.unexpectedf("prepare of %s (%s/%s) succeeded, but by the driver's services it does not fit on %s: %s", uid, m.ns, m.pod, noRoomOn, noRoom)
	case err == nil:
		w.claims[uid] = c
		w.api.claims[c.Namespace+"/"+c.Name] = c
		w.outcomes[map[bool]string{false: "prepared, no options", true: "prepared with options"}[m.asked]]++
	case !nriUp:
		w.outcomes["refused: NRI down"]++
	case m.want.Refused != "":
		if !errors.Is(err, jobpolicy.ErrRefused) {
			w.unexpectedf("prepare of %s (%s/%s): %v; want the policy's refusal: %s", uid, m.ns, m.pod, err, m.want.Refused)
		}
		w.outcomes["refused by the policy"]++
	case noRoom != nil:
		if !errors.As(err, &fitErr) || fitErr.Resource != noRoom.Resource || fitErr.Pool != noRoom.Pool {
			w.unexpectedf("prepare of %s (%s/%s): %v; want it refused on %s: %s", uid, m.ns, m.pod, err, noRoomOn, noRoom)
		}
		w.outcomes["refused: "+noRoom.String()]++
	default:
		w.fail("prepare of %s (%s/%s) on %v: %v", uid, m.ns, m.pod, nics, err)
	}
	if err != nil {
		w.checkRefusedLeftNothing(uid, m, before)
	}
}

func (w *draWorld) unexpectedf(format string, args ...any) {
	if w.unexpected == "" {
		w.unexpected = fmt.Sprintf(format, args...)
	}
}

// simServices lists every service of a simulated NIC, as the driver
// holds them.
func (w *draWorld) simServices(nic string) []sim.Service {
	w.t.Helper()
	svcs, err := w.r.sims[nic].Services()
	if err != nil {
		w.t.Fatal(err)
	}
	return svcs
}

// driverServices are the IDs of every service on the NICs, by NIC.
func (w *draWorld) driverServices() map[string][]uint32 {
	w.t.Helper()
	ids, err := optionstest.ServiceIDs(w.r.sims)
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

// checkRefusedLeftNothing fails the test unless a claim whose Prepare
// failed left no service (the driver's services are those before it), no
// record, and no hold on its job's lease that no other claim's record
// accounts for.
func (w *draWorld) checkRefusedLeftNothing(uid string, m *claimModel, before map[string][]uint32) {
	w.t.Helper()
	after := w.driverServices()
	for _, nic := range []string{"cxi0", "cxi1"} {
		if !slices.Equal(before[nic], after[nic]) {
			w.fail("refused claim %s (%s/%s) left services behind on %s: %v before its Prepare, %v after", uid, m.ns, m.pod, nic, before[nic], after[nic])
		}
	}
	if rec, ok := w.r.get(uid); ok {
		w.fail("refused claim %s (%s/%s) left its record %+v", uid, m.ns, m.pod, rec)
	}
	key := m.jobKey()
	if slices.ContainsFunc(w.r.m.Records(), func(r Record) bool { return r.LeaseKey == key && !r.Released }) {
		return // another claim of the job holds the lease
	}
	if w.r.leaser.holds(key) {
		w.fail("refused claim %s (%s/%s) left the node holding its job's lease %s, which no claim's record accounts for", uid, m.ns, m.pod, key)
	}
}

// checkOptions checks, from the simulated driver's services, the
// invariants of service options: no NIC holds more pools than it has or
// more of a resource than it has; every service the agent made for a
// claim carries the VNI the controller leases the claim's job first and
// then exactly the named VNIs the claim asked for and its namespace may
// join; no job's VNI is carried by another job's services; a service
// admits no running pod but its claim's; and each service's traffic
// classes and limits are what the model makes of the claim's request.
func (w *draWorld) checkOptions(recorded map[string]map[uint32]*Record) {
	w.t.Helper()
	podOfInode := map[uint32]string{}
	for pod, inode := range w.sandboxes {
		podOfInode[inode] = pod
	}
	jobOfVNI := map[uint16]string{}
	for _, nic := range []string{"cxi0", "cxi1"} {
		all := w.simServices(nic)
		for _, bad := range optionstest.CheckNIC(all) {
			w.fail("%s: %s", nic, bad)
		}
		n := optionstest.NICOf(all)
		for _, s := range all {
			id := s.Desc.SvcID
			if id == cxi.DefaultServiceID || s.Desc.IsSystemSvc {
				continue
			}
			rec := recorded[nic][id]
			if rec == nil {
				w.fail("service %d on %s has no record", id, nic)
			}
			m := w.models[rec.UID]
			vnis := s.Desc.ValidVNIs()
			key := m.jobKey()
			if len(vnis) == 0 {
				w.fail("service %d on %s of claim %s carries no VNI", id, nic, rec.UID)
			}
			if other, ok := jobOfVNI[vnis[0]]; ok && other != key {
				w.fail("VNI %d is the job VNI of services of both %s and %s", vnis[0], other, key)
			}
			jobOfVNI[vnis[0]] = key
			for _, inode := range s.NetNS {
				if pod, ok := podOfInode[inode]; ok && pod != m.pod {
					w.fail("service %d on %s of claim %s (pod %s/%s) admits the namespace of pod %s", id, nic, rec.UID, m.ns, m.pod, pod)
				}
			}
			w.r.leaser.mu.Lock()
			jobVNI, leased := w.r.leaser.vnis[key]
			w.r.leaser.mu.Unlock()
			if !leased {
				w.fail("service %d on %s of claim %s carries VNIs %v, but the controller never leased its job %s", id, nic, rec.UID, vnis, key)
			}
			for _, bad := range m.want.Check(s, jobVNI, n) {
				w.fail("service %d on %s of claim %s (%s/%s, asked %s): %s", id, nic, rec.UID, m.ns, m.pod, m.asks(), bad)
			}
		}
	}
}

// stopPod ends pod's sandbox: its path is unmounted and its namespace
// lives on only while a handle holds it.
func (w *draWorld) stopPod(pod string) {
	if inode, ok := w.sandboxes[pod]; ok {
		delete(w.sandboxes, pod)
		delete(w.ns.live, inode)
		delete(w.ns.paths, w.paths[pod])
		delete(w.paths, pod)
	}
}

// reloadDriver is a driver reload: every service goes but the default
// and the Ethernet service, and other stacks make their system services
// again, on the lowest free IDs.
func (w *draWorld) reloadDriver() {
	for _, nic := range []string{"cxi0", "cxi1"} {
		gone, err := optionstest.ReloadDriver(w.r.sims[nic])
		if err != nil {
			w.t.Fatal(err)
		}
		w.logf("%s: driver reloaded, services %v gone", nic, gone)
		w.holdPools(nic)
	}
}

// sandboxesMadeAgain: while the agent is down, the node reboots (every
// running pod's sandbox is made again, half the time with the driver
// reloaded too) or some pods' sandboxes are made again. The old
// namespaces go (the agent's handles went with it), and each new one gets
// the lowest free inode, in the random order the sandboxes are made, so
// that pods get each other's old inodes; a quarter of the time a host
// process makes a namespace first. Half the time the runtime names a new
// sandbox's namespace by the pod, at its old path, else at a new one.
// Then the agent starts: half the time the sandboxes were made while it
// was down (the runtime lists them when NRI connects), else they are made
// once it runs (NRI binds each).
func (w *draWorld) sandboxesMadeAgain(ctx context.Context) {
	pods := slices.Sorted(maps.Keys(w.sandboxes))
	if len(pods) == 0 {
		return
	}
	reboot := w.rng.IntN(2) == 0
	w.rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	if !reboot {
		pods = pods[:1+w.rng.IntN(len(pods))]
	}
	samePath := w.rng.IntN(2) == 0
	agentFirst := w.rng.IntN(2) == 0
	w.stopAgent()
	old := map[string]string{}
	for _, pod := range pods {
		old[pod] = w.paths[pod]
		w.stopPod(pod)
	}
	if reboot {
		clear(w.ns.live) // every namespace, the host processes' too
		clear(w.ns.paths)
	}
	what := "sandboxes made again while the agent is down"
	if reboot {
		what = "node reboots"
	}
	if w.rng.IntN(4) == 0 {
		what += fmt.Sprintf(", a host process's namespace first (%d)", w.ns.make(""))
	}
	w.logf("%s: %v (at the same paths %v; agent first %v)", what, pods, samePath, agentFirst)
	if reboot && w.rng.IntN(2) == 0 {
		w.reloadDriver()
	}
	makeAll := func() {
		for _, pod := range pods {
			path := old[pod]
			if !samePath {
				path = w.newPath()
			}
			if agentFirst {
				_ = w.startSandbox(ctx, pod, path, false)
				continue
			}
			inode := w.ns.make(path)
			w.sandboxes[pod], w.paths[pod], w.last[pod] = inode, path, inode
			w.logf("sandbox %s netns %d at %s, the agent down", pod, inode, path)
		}
	}
	if !agentFirst {
		makeAll()
	}
	w.startAgent()
	if agentFirst {
		makeAll()
	}
}

func (w *draWorld) forget(uid string) {
	delete(w.api.claims, w.claims[uid].Namespace+"/"+w.claims[uid].Name)
	delete(w.claims, uid)
}

// check: no service admits a namespace that no handle of the agent and no
// running sandbox keeps alive; no service admits more than one namespace,
// nor a claim's services two; no service without a record; no lease
// without a holder, no holder without its lease; a claim's VNI is its
// job's alone; the options' invariants (checkOptions).
func (w *draWorld) check() {
	recorded := map[string]map[uint32]*Record{}
	held := map[string]bool{}
	for _, r := range w.r.m.Records() {
		rec := &r
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
	w.checkAdmitsCurrent(recorded)
	w.checkOptions(recorded)
	if w.unexpected != "" {
		w.fail("%s", w.unexpected)
	}
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
				if !w.ns.exists(inode) {
					w.fail("service %d on %s (claim %s) admits namespace %d, which is gone: its inode can pass to another pod", s.Desc.SvcID, nic, rec.UID, inode)
				}
				if w.ns.held[inode] == 0 && !slices.Contains(slices.Collect(mapsValues(w.sandboxes)), inode) {
					w.fail("service %d on %s admits namespace %d, which nothing holds open", s.Desc.SvcID, nic, inode)
				}
			}
		}
	}
}

// checkAdmitsCurrent checks issue 32's invariant from the driver's
// services and the model's namespaces: no service admits a namespace that
// is not its holder's current one. Every namespace member of a service
// (enabled or not: the driver cannot take one back) is the namespace of
// the running sandbox of the pod of the claim that records the service;
// or, where that pod's sandbox ended, its last namespace while it still
// exists (a handle holds it: no other namespace can have its inode). An
// unbound service is fine.
func (w *draWorld) checkAdmitsCurrent(recorded map[string]map[uint32]*Record) {
	w.t.Helper()
	owner := map[uint32]string{}
	for pod, inode := range w.sandboxes {
		owner[inode] = pod
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		for _, s := range w.simServices(nic) {
			id := s.Desc.SvcID
			if id == cxi.DefaultServiceID || s.Desc.IsSystemSvc || len(s.NetNS) == 0 {
				continue
			}
			rec := recorded[nic][id]
			if rec == nil {
				w.fail("service %d on %s admits namespaces %v and no claim records it", id, nic, s.NetNS)
			}
			pod := w.models[rec.UID].pod
			for _, inode := range s.NetNS {
				cur, running := w.sandboxes[pod]
				if inode == cur && running || !running && inode == w.last[pod] && w.ns.exists(inode) {
					continue
				}
				now := "a namespace that is gone: the kernel may give its inode to the next one made"
				switch {
				case owner[inode] != "":
					now = "now the namespace of pod " + owner[inode]
				case w.ns.exists(inode):
					now = "now a namespace of no running pod"
				}
				w.fail("service %d on %s (enabled %v) of claim %s admits namespace %d, %s; its pod %s runs %v in namespace %d",
					id, nic, s.Desc.Enable, rec.UID, inode, now, pod, running, cur)
			}
		}
		if n, want := optionstest.SystemServices(w.simServices(nic)), w.system[nic]; n != want {
			w.fail("%s has %d system services, want %d: the agent destroyed another stack's service", nic, n, want)
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
//
// A share of the claims ask for service options, and after every step
// the driver's services are what the options ask for (after the policy),
// no NIC holds more pools or resources than it has, no VNI is carried but
// its job's and the named ones its claim may join, and a refused claim
// left nothing behind.
func TestDRAInvariantsUnderInterleavings(t *testing.T) {
	seeds := *interleaveSeeds
	if testing.Short() {
		seeds = min(seeds, 10)
	}
	outcomes, ran := map[string]int{}, 0
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			ran++ // a skipped seed counts: the outcomes are over the others
			w := newDRAWorld(t, uint64(seed), outcomes)
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
	t.Logf("prepares by outcome: %v", outcomes)
	if ran >= 30 && !t.Failed() {
		// The seeds reach every refusal the options can meet.
		for _, want := range []string{"prepared with options", "refused by the policy", "refused: no LEs pool left", "refused: no TLEs pool left", "refused: not enough LEs"} {
			if outcomes[want] == 0 {
				t.Errorf("no Prepare %s over %d seeds: %v", want, ran, outcomes)
			}
		}
	}
}

package devplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

const res = "hpe.com/cxi"

// fakePods is the kubelet's PodResources as the test sets it. Its List
// alone decides whether a pod is gone; the rule with the kubelet's device
// checkpoint is tested with podwatch.Watcher (see cleanup_test.go).
type fakePods struct {
	mu   sync.Mutex
	snap *podwatch.Snapshot
}

func (f *fakePods) Latest() *podwatch.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

func (f *fakePods) Refresh(context.Context) (*podwatch.Snapshot, error) {
	return f.Latest(), nil
}

func (f *fakePods) Find(_ context.Context, resource string, ids []string) (*podwatch.Pod, string, error) {
	if p, c, ok := f.Latest().Find(resource, ids); ok {
		return p, c, nil
	}
	return nil, "", fmt.Errorf("no pod holds devices %v", ids)
}

func (f *fakePods) Gone(h podwatch.Holder) bool {
	p := f.Latest().Pods[h.Namespace+"/"+h.Name]
	return p == nil || h.UID != "" && p.UID != "" && p.UID != h.UID
}

func (f *fakePods) set(pods ...*podwatch.Pod) {
	snap := &podwatch.Snapshot{Pods: map[string]*podwatch.Pod{}}
	for _, p := range pods {
		snap.Pods[p.Key()] = p
	}
	f.mu.Lock()
	f.snap = snap
	f.mu.Unlock()
}

func pod(ns, name, uid, container string, ids ...string) *podwatch.Pod {
	return &podwatch.Pod{Namespace: ns, Name: name, UID: uid,
		Containers: map[string]map[string][]string{container: {res: ids}}}
}

// fakeLeaser hands out job VNIs by owner and counts holds.
type fakeLeaser struct {
	mu       sync.Mutex
	next     uint16
	held     map[string]uint16 // pod key → VNI
	released []string
	failNext error
	// failRelease fails every release while set.
	failRelease error
}

func (l *fakeLeaser) AcquireJobVNI(_ context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.failNext; err != nil {
		l.failNext = nil
		return controllerclient.Lease{}, err
	}
	key := p.Namespace + "/" + p.Name
	if v, ok := l.held[key]; ok {
		return controllerclient.Lease{Key: key, VNI: v, Scope: controllerclient.ScopeJob}, nil
	}
	l.next++
	v := 1023 + l.next
	l.held[key] = v
	return controllerclient.Lease{Key: key, VNI: v, Scope: controllerclient.ScopeJob}, nil
}

func (l *fakeLeaser) ReleaseJobVNI(_ context.Context, lease controllerclient.Lease) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failRelease != nil {
		return l.failRelease
	}
	key := lease.Key
	if l.held[key] != lease.VNI {
		return fmt.Errorf("release of %s VNI %d not held", key, lease.VNI)
	}
	delete(l.held, key)
	l.released = append(l.released, key)
	return nil
}

type fakeNetns map[string]uint32

func (f fakeNetns) Open(_ context.Context, uid string) (nsHandle, error) {
	if ino, ok := f[uid]; ok {
		return &fakeHandle{ino: ino}, nil
	}
	return nil, errors.New("no such pod process")
}

// fakeHandle is a namespace held open.
type fakeHandle struct {
	ino    uint32
	closed atomic.Bool
}

func (h *fakeHandle) Inode() uint32 { return h.ino }

func (h *fakeHandle) Close() error {
	h.closed.Store(true)
	return nil
}

// rig is a binder over two simulated NICs.
type rig struct {
	b *binder
	// drvs are the NICs' drivers, which only the engine calls; a test may
	// swap one for a faulty one.
	drvs     testNICs
	m        Metrics
	store    *checkpoint.Store
	pods     *fakePods
	leaser   *fakeLeaser
	sims     map[string]*sim.Device
	dir      string
	events   *eventtest.Recorder
	em       engine.Metrics
	teardown prometheus.Histogram
	// busy counts the EBUSY answers to SVC_DESTROY, by NIC.
	busy *prometheus.CounterVec
	// defaults are the engine's service defaults, as configured.
	defaults engine.Defaults
	// addrs and linker are the engine's hsn parts; nil: none, netlink.
	addrs  engine.AddressAllocator
	linker engine.Linker
}

const (
	dev0 = "0000:21:00.0"
	dev1 = "0000:41:00.0"
)

func newRig(t testing.TB, dir string, leaser *fakeLeaser, netns fakeNetns) *rig {
	t.Helper()
	if leaser == nil {
		leaser = &fakeLeaser{held: map[string]uint16{}}
	}
	r := &rig{pods: &fakePods{}, leaser: leaser, sims: map[string]*sim.Device{}, dir: dir, events: &eventtest.Recorder{}}
	r.pods.set()
	m := newTestMetrics()
	// As the agent makes it: PreStart waits until the spec is resolvable.
	cdiw, err := cdispec.New(filepath.Join(dir, "cdi"), res, cdispec.WaitVisible(time.Second, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cdiw.Close() })
	b := &binder{
		node: "n1", resource: res, logger: testLogger(t),
		nics: map[string]*nic{}, devNIC: map[string]string{dev0: "cxi0", dev1: "cxi1"},
		resolve: map[string]func([]string) ([]*nic, error){},
		pods:    r.pods, netns: netns,
		files:   &allocFiles{dir: filepath.Join(dir, "containers"), cdi: cdiw},
		metrics: m, events: r.events, now: time.Now,
	}
	b.setPolicy(policy{})
	r.drvs, r.m, r.defaults = testNICs{}, m, engine.Defaults{TCs: cxi.DefaultTrafficClasses}
	r.busy = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "busy"}, []string{"nic"})
	fastRetry := backoff.Policy{Initial: time.Millisecond, Attempts: 3, Wait: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	for i, name := range []string{"cxi0", "cxi1"} {
		s, err := sim.Open(filepath.Join(dir, "sim"), name, sim.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		r.sims[name] = s
		r.drvs[name] = cxi.NewClient(busyCounting{Device: uapi.NewDevice(s), busy: r.busy.WithLabelValues(name)}, cxi.WithDestroyRetry(fastRetry))
		b.nics[name] = &nic{name: name, index: i, devPath: "/dev/" + name}
	}
	b.resolve[res] = b.nicsOf
	store, err := checkpoint.Open(filepath.Join(dir, "checkpoint.json"), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	r.b, r.store = b, store
	r.useLeaser(t, leaser)
	return r
}

// useLeaser makes the binder's engine anew over the same record, leasing
// through l.
func (r *rig) useLeaser(t testing.TB, l engine.Leaser) {
	t.Helper()
	r.usePins(t, l, nil)
}

// usePins makes the binder's engine anew over the same record, leasing
// through l and pinning with pins (nil: none), as the agent makes it.
func (r *rig) usePins(t testing.TB, l engine.Leaser, pins engine.Pinner) {
	t.Helper()
	eng, err := engine.New(engine.Config{
		Node: "n1", Store: r.store, NICs: r.drvs, Leaser: l, Metrics: r.engineMetrics(), Pins: pins, Addrs: r.addrs, Linker: r.linker,
		Defaults: func() engine.Defaults { return r.defaults },
		Events:   r.events, Log: r.b.logger, Now: r.b.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.b.eng = eng
}

// useConfig applies c as the agent does: the front end's policy, the job
// options, and the engine's service defaults (traffic classes, adjusted
// reservations; these tests configure no limits).
func (r *rig) useConfig(t testing.TB, c config.Config) {
	t.Helper()
	if len(c.Limits) > 0 {
		t.Fatal("useConfig: the rig does not apply limits")
	}
	r.b.setPolicy(policyFrom(c))
	jobs := jobpolicy.New(c)
	r.b.jobs = func() *jobpolicy.Policy { return jobs }
	var tcs cxi.TrafficClasses
	for _, name := range c.TrafficClasses {
		tc, err := cxi.ParseTrafficClasses(name)
		if err != nil {
			t.Fatal(err)
		}
		tcs |= tc
	}
	r.defaults = engine.Defaults{TCs: tcs, Adjust: c.JobOptions.Adjust()}
}

// engineMetrics are the engine's series, made once per rig.
func (r *rig) engineMetrics() engine.Metrics {
	if r.em.ServiceErrors == nil {
		r.teardown = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "teardown"})
		r.em = engine.Metrics{
			ServiceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "service_errors"}, []string{"nic", "op"}),
			Stuck:         prometheus.NewCounter(prometheus.CounterOpts{Name: "stuck"}),
			Teardown:      r.teardown,
			HSNErrors:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hsn_errors_total", Help: "hsn errors."}, []string{"op"}),
		}
	}
	return r.em
}

// busyCounting counts a device's EBUSY answers to SVC_DESTROY, as the
// agent's drivers do.
type busyCounting struct {
	cxi.Device
	busy prometheus.Counter
}

func (d busyCounting) DestroyService(id uint32) error {
	err := d.Device.DestroyService(id)
	if errors.Is(err, unix.EBUSY) {
		d.busy.Inc()
	}
	return err
}

// testNICs are a rig's drivers as the engine reads them.
type testNICs map[string]engine.Driver

func (n testNICs) Driver(name string) (engine.Driver, bool) {
	d, ok := n[name]
	return d, ok
}

func (n testNICs) Names() []string { return slices.Sorted(maps.Keys(n)) }

// newTestMetrics are the front end's series, unregistered.
func newTestMetrics() Metrics {
	return Metrics{
		PreStart:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prestart", Help: "PreStart."}, []string{"result"}),
		Nudges:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nudges_total", Help: "Nudges."}, []string{"resource"}),
		PodLists:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lists_total", Help: "Lists."}, []string{"result"}),
		ListLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "list_seconds", Help: "List latency."}),
	}
}

// services lists the services of one simulated NIC that are not the
// driver's own (the default and the Ethernet service).
func (r *rig) services(t testing.TB, nicName string) []cxi.Service {
	t.Helper()
	all, err := r.drvs[nicName].List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(s cxi.Service) bool { return s.IsDefault() || s.System })
}

func (r *rig) envFile(t *testing.T, ids ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.b.files.dir, cdispec.AllocationKey(ids), EnvFileName))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPreStartBindsPodOnEveryNIC(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0, dev1))
	if err := r.b.PreStart(t.Context(), res, []string{dev1, dev0}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"cxi0", "cxi1"} {
		svcs := r.services(t, n)
		if len(svcs) != 1 {
			t.Fatalf("%s services = %+v, want one", n, svcs)
		}
		s := svcs[0]
		if !slices.Equal(s.VNIs, []uint16{1024}) || !s.Enabled || !s.RestrictedMembers || !s.RestrictedTCs {
			t.Fatalf("%s service = %+v", n, s)
		}
		if len(s.Members) != 1 || s.Members[0] != (cxi.Member{Type: cxi.MemberNetNS, ID: 4026532001}) {
			t.Fatalf("%s members = %v, want only netns 4026532001", n, s.Members)
		}
	}
	env := r.envFile(t, dev0, dev1)
	for _, want := range []string{"SLINGSHOT_DEVICES=cxi0,cxi1", "SLINGSHOT_VNIS=1024", "SLINGSHOT_TCS=0xa", "SLINGSHOT_SVC_IDS="} {
		if !strings.Contains(env, want) {
			t.Errorf("env file lacks %q:\n%s", want, env)
		}
	}
	// The checkpoint on disk has the pod, so a restart knows its services.
	st, err := checkpoint.Load(r.store.Path(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	p := st.Holders["ns/a"]
	if p == nil || p.VNI != 1024 || len(p.Services) != 2 || p.Netns != 4026532001 || p.UID != "uid-a" {
		t.Fatalf("checkpoint pod = %+v", p)
	}

	// A container restart runs PreStart again: nothing new is made.
	if err := r.b.PreStart(t.Context(), res, []string{dev0, dev1}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.services(t, "cxi0")) + len(r.services(t, "cxi1")); n != 2 {
		t.Fatalf("%d services after a container restart, want 2", n)
	}
}

func TestPreStartWithoutNetnsNeverOpensMembership(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	err := r.b.PreStart(t.Context(), res, []string{dev0})
	if !errors.Is(err, ErrNoMember) {
		t.Fatalf("PreStart = %v, want ErrNoMember", err)
	}
	if svcs := r.services(t, "cxi0"); len(svcs) != 0 {
		t.Fatalf("services made without a member: %+v", svcs)
	}
	if len(r.leaser.held) != 0 {
		t.Fatalf("lease kept after a refused bind: %v", r.leaser.held)
	}

	// With a fallback GID configured, the GID is the member.
	gid := cxi.Member{Type: cxi.MemberGID, ID: 5000}
	r.b.setPolicy(policy{fallback: &gid})
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	svcs := r.services(t, "cxi0")
	if len(svcs) != 1 || len(svcs[0].Members) != 1 || svcs[0].Members[0] != gid {
		t.Fatalf("services = %+v, want one with member gid=5000", svcs)
	}
}

func TestPreStartUnknownPod(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{})
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err == nil || !strings.Contains(err.Error(), "no pod holds") {
		t.Fatalf("PreStart = %v, want no-pod error", err)
	}
	if err := r.b.PreStart(t.Context(), res, []string{"0000:99:00.0"}); err == nil {
		t.Fatal("PreStart of an unknown device succeeded")
	}
}

func TestPreStartLeaseFailureLeavesNothing(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	r.leaser.failNext = errors.New("controller unavailable")
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err == nil {
		t.Fatal("PreStart succeeded without a lease")
	}
	if len(r.services(t, "cxi0")) != 0 || len(r.store.IDs(checkpoint.KindPod)) != 0 {
		t.Fatal("a failed lease left services or a record")
	}
}

func TestCleanupAfterPodExit(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1))
	for _, id := range []string{dev0, dev1} {
		if err := r.b.PreStart(t.Context(), res, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	cdiDir := filepath.Join(r.dir, "cdi")
	specs, _ := os.ReadDir(cdiDir)
	if len(specs) != 2 {
		t.Fatalf("%d CDI specs, want 2", len(specs))
	}

	r.pods.set(pod("ns", "b", "uid-b", "main", dev1)) // a exited
	var wg sync.WaitGroup
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if svcs := r.services(t, "cxi0"); len(svcs) != 0 {
		t.Fatalf("services of the exited pod remain: %+v", svcs)
	}
	if len(r.services(t, "cxi1")) != 1 {
		t.Fatal("the live pod lost its service")
	}
	if !slices.Equal(r.leaser.released, []string{"ns/a"}) {
		t.Fatalf("released = %v, want [ns/a]", r.leaser.released)
	}
	if _, err := os.Stat(filepath.Join(r.b.files.dir, cdispec.AllocationKey([]string{dev0}))); !os.IsNotExist(err) {
		t.Fatalf("per-container directory of the exited pod remains: %v", err)
	}
	if specs, _ := os.ReadDir(cdiDir); len(specs) != 1 {
		t.Fatalf("%d CDI specs after cleanup, want 1", len(specs))
	}
	if n := histogramCount(t, r.teardown); n != 1 {
		t.Fatalf("cleanup latency observed %d times, want 1", n)
	}
}

func TestCleanupRetriesBusyServices(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	id := r.record(t, "ns/a").Services[0].ID
	if err := r.sims["cxi0"].SetInUse(id, 1); err != nil {
		t.Fatal(err)
	}
	r.pods.set()
	var wg sync.WaitGroup
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if len(r.services(t, "cxi0")) != 1 || !r.has("ns/a") {
		t.Fatal("a busy service was forgotten")
	}
	if got := testutil.ToFloat64(r.em.Stuck); got != 1 {
		t.Fatalf("stuck services = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.busy.WithLabelValues("cxi0")); got != 3 {
		t.Fatalf("EBUSY answers = %v, want 3 (one per attempt)", got)
	}
	if len(r.leaser.released) != 0 {
		t.Fatal("VNI released while its service still exists")
	}
	// The last user goes away; the next sweep finishes the job.
	if err := r.sims["cxi0"].SetInUse(id, 0); err != nil {
		t.Fatal(err)
	}
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if len(r.services(t, "cxi0")) != 0 || r.has("ns/a") || len(r.leaser.released) != 1 {
		t.Fatal("busy service not cleaned up once free")
	}
}

func TestReplacedPodIsRetiredFirst(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-1": 4026532001, "uid-2": 4026532002})
	r.pods.set(pod("ns", "s-0", "uid-1", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	// The StatefulSet pod is recreated with a new UID before the exit of
	// the old one was noticed.
	r.pods.set(pod("ns", "s-0", "uid-2", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	svcs := r.services(t, "cxi0")
	if len(svcs) != 1 || svcs[0].Members[0].ID != 4026532002 {
		t.Fatalf("services = %+v, want one for the new pod's netns", svcs)
	}
	if p := r.record(t, "ns/s-0"); p.UID != "uid-2" {
		t.Fatalf("recorded pod = %+v, want uid-2", p)
	}
}

func TestReconcileAfterRestart(t *testing.T) {
	dir := t.TempDir()
	leaser := &fakeLeaser{held: map[string]uint16{}}
	netns := fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002}
	r := newRig(t, dir, leaser, netns)
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1))
	for _, id := range []string{dev0, dev1} {
		if err := r.b.PreStart(t.Context(), res, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	// A bind that crashed after creating its service and before recording
	// it: the record (saved before any service) has a VNI and netns.
	crashed := checkpoint.Holder{Kind: checkpoint.KindPod, UID: "uid-c", Namespace: "ns", Name: "c", VNI: 1500, Scope: "job", LeaseKey: "ns/c", Netns: 4026532003, DeviceIDs: map[string][]string{}}
	if err := r.store.Put(crashed); err != nil {
		t.Fatal(err)
	}
	leaser.held["ns/c"] = 1500
	if err := r.store.Save(); err != nil {
		t.Fatal(err)
	}
	orphan, err := r.drvs["cxi0"].Create(t.Context(), cxi.ServiceSpec{VNIs: []uint16{1500}, Members: []cxi.Member{{Type: cxi.MemberNetNS, ID: 4026532003}}, TCs: cxi.DefaultTrafficClasses})
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's services: one outside the managed range, one inside.
	foreignOut, err := r.drvs["cxi1"].Create(t.Context(), cxi.ServiceSpec{VNIs: []uint16{100}, Members: []cxi.Member{{Type: cxi.MemberUID, ID: 1}}, TCs: cxi.DefaultTrafficClasses})
	if err != nil {
		t.Fatal(err)
	}
	foreignIn, err := r.drvs["cxi1"].Create(t.Context(), cxi.ServiceSpec{VNIs: []uint16{3000}, Members: []cxi.Member{{Type: cxi.MemberUID, ID: 1}}, TCs: cxi.DefaultTrafficClasses})
	if err != nil {
		t.Fatal(err)
	}
	// The driver lost pod b's service (a driver reload).
	if err := r.drvs["cxi1"].Destroy(t.Context(), r.record(t, "ns/b").Services[0].ID); err != nil {
		t.Fatal(err)
	}

	// The agent restarts: a new binder on the same checkpoint and driver.
	// Pod a and b still run; c never started.
	r2 := newRig(t, dir, leaser, netns)
	r2.pods.set(pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1))
	rep, err := r2.b.Reconcile(t.Context(), ReconcileOptions{CleanManaged: true, ManagedLo: 1024, ManagedHi: 65535})
	if err != nil {
		t.Fatal(err)
	}
	want := reconcileReport{Kept: 1, Recreated: 1, Destroyed: 2, CleanedPods: 1, Foreign: 1}
	if rep != want {
		t.Fatalf("report = %+v, want %+v", rep, want)
	}
	ids := func(n string) []uint32 {
		var out []uint32
		for _, s := range r2.services(t, n) {
			out = append(out, s.ID)
		}
		return out
	}
	if slices.Contains(ids("cxi0"), orphan.ID) {
		t.Fatal("orphan of the crashed bind survived")
	}
	if slices.Contains(ids("cxi1"), foreignIn.ID) || !slices.Contains(ids("cxi1"), foreignOut.ID) {
		t.Fatalf("cxi1 services %v: want the in-range foreign one gone and the other kept", ids("cxi1"))
	}
	if len(ids("cxi0")) != 1 || len(ids("cxi1")) != 2 {
		t.Fatalf("cxi0 %v, cxi1 %v: want a's service, and b's re-created one beside the foreign one", ids("cxi0"), ids("cxi1"))
	}
	if r2.has("ns/c") || leaser.held["ns/c"] != 0 {
		t.Fatal("the crashed pod's record or lease survived")
	}
	// Pod b's env file names its new service.
	newID := r2.record(t, "ns/b").Services[0].ID
	if env := r2.envFile(t, dev1); !strings.Contains(env, fmt.Sprintf("SLINGSHOT_SVC_IDS=%d\n", newID)) {
		t.Fatalf("env not republished with service %d:\n%s", newID, env)
	}
}

func TestAllocateResponse(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{})
	nr := &nicResource{name: res, b: r.b, shares: 1}
	resp, err := nr.Allocate(t.Context(), &pluginapi.ContainerAllocateRequest{DevicesIds: []string{dev1, dev0}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Envs[engine.EnvDevices] != "cxi0,cxi1" || resp.Envs[engine.EnvTCs] != "0xa" {
		t.Fatalf("envs = %v", resp.Envs)
	}
	if len(resp.Devices) != 2 || resp.Devices[0].HostPath != "/dev/cxi0" || resp.Devices[0].Permissions != "rw" {
		t.Fatalf("devices = %v", resp.Devices)
	}
	key := cdispec.AllocationKey([]string{dev0, dev1})
	if len(resp.Mounts) != 1 || resp.Mounts[0].HostPath != filepath.Join(r.b.files.dir, key) || !resp.Mounts[0].ReadOnly {
		t.Fatalf("mounts = %v", resp.Mounts)
	}
	if len(resp.CdiDevices) != 1 || resp.CdiDevices[0].Name != res+"="+key {
		t.Fatalf("cdi devices = %v", resp.CdiDevices)
	}
	// Allocate writes nothing: the per-container directory comes at PreStart.
	if _, err := os.Stat(resp.Mounts[0].HostPath); !os.IsNotExist(err) {
		t.Fatalf("Allocate created %s", resp.Mounts[0].HostPath)
	}
	if _, err := nr.Allocate(t.Context(), &pluginapi.ContainerAllocateRequest{DevicesIds: []string{"bogus"}}); err == nil {
		t.Fatal("Allocate of an unknown device succeeded")
	}
}

func TestPreferredAllocationSpreadsShares(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{})
	r.b.devNIC = map[string]string{}
	topo := map[string][]int64{}
	var available []string
	for i, name := range []string{"cxi0", "cxi1", "cxi2", "cxi3"} {
		for s := range 2 {
			id := fmt.Sprintf("nic%d-s%d", i, s)
			r.b.devNIC[id] = name
			topo[id] = []int64{int64(i / 2)}
			available = append(available, id)
		}
	}
	nr := &nicResource{name: res, b: r.b, shares: 2, topo: topo}
	tests := []struct {
		size      int
		must      []string
		wantNICs  int
		sameNUMA  bool
		wantEmpty bool
	}{
		{size: 2, wantNICs: 2, sameNUMA: true},
		{size: 1, must: []string{"nic3-s1"}, wantNICs: 1},
		{size: 2, must: []string{"nic3-s1"}, wantNICs: 2, sameNUMA: true},
		{size: 4, wantNICs: 4},
		{size: 6, wantNICs: 4},
		{size: 9, wantEmpty: true},
	}
	for _, tt := range tests {
		got, err := nr.PreferredAllocation(t.Context(), available, tt.must, tt.size)
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantEmpty {
			if len(got) != 0 {
				t.Errorf("size %d: got %v, want no preference", tt.size, got)
			}
			continue
		}
		if len(got) != tt.size {
			t.Fatalf("size %d must %v: got %v", tt.size, tt.must, got)
		}
		nics := map[string]bool{}
		numa := map[int64]bool{}
		for _, id := range got {
			nics[r.b.devNIC[id]] = true
			numa[topo[id][0]] = true
		}
		for _, m := range tt.must {
			if !slices.Contains(got, m) {
				t.Errorf("size %d: %v lacks must-include %s", tt.size, got, m)
			}
		}
		if len(nics) != tt.wantNICs || tt.sameNUMA && len(numa) != 1 {
			t.Errorf("size %d must %v: got %v over %d NICs and %d NUMA nodes", tt.size, tt.must, got, len(nics), len(numa))
		}
	}
}

// record returns the binder's record of key, failing the test without one.
func (r *rig) record(t testing.TB, key string) checkpoint.Holder {
	t.Helper()
	p, ok := r.store.Get(key)
	if !ok {
		t.Fatalf("no record of %s; records: %v", key, r.store.IDs(checkpoint.KindPod))
	}
	return p
}

// has reports whether the binder records key.
func (r *rig) has(key string) bool {
	_, ok := r.store.Get(key)
	return ok
}

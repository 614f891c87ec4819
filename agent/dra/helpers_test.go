package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

const testDriver = "cxi.slingshot.hpe.com"

// fakeLeaser is the controller as the node sees it: one VNI per lease
// key, held by the node from acquire to release. A pod's job is its name
// up to the last dash ("train-0" → "train").
type fakeLeaser struct {
	mu       sync.Mutex
	next     uint16
	vnis     map[string]uint16
	held     map[string]bool
	releases int
	acquires int
	failRel  bool
}

func newFakeLeaser() *fakeLeaser {
	return &fakeLeaser{next: 2000, vnis: map[string]uint16{}, held: map[string]bool{}}
}

func (f *fakeLeaser) AcquireJobVNI(_ context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquires++
	var key string
	scope := controllerclient.ScopeJob
	switch p := pod.Policy; {
	case p == "none":
		return controllerclient.Lease{Scope: controllerclient.ScopeNone}, nil
	case p == "pod":
		key, scope = "pod/"+pod.UID, controllerclient.ScopePod
	case strings.HasPrefix(p, draclaim.GroupPolicyPrefix):
		_, uid, _, _ := draclaim.ParseGroupPolicy(p)
		key = "job/" + pod.Namespace + "/" + uid
	case strings.HasPrefix(p, "claim:"):
		key, scope = "claim/"+pod.Namespace+"/"+strings.TrimPrefix(p, "claim:"), controllerclient.ScopeClaim
	default:
		job := pod.Name
		if i := strings.LastIndex(job, "-"); i > 0 {
			job = job[:i]
		}
		key = "job/" + pod.Namespace + "/" + job
	}
	v, ok := f.vnis[key]
	if !ok {
		v = f.next
		f.next++
		f.vnis[key] = v
	}
	f.held[key] = true
	return controllerclient.Lease{Key: key, VNI: v, Scope: scope}, nil
}

func (f *fakeLeaser) ReleaseJobVNI(_ context.Context, l controllerclient.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRel {
		return fmt.Errorf("controller unreachable")
	}
	delete(f.held, l.Key)
	f.releases++
	return nil
}

func (f *fakeLeaser) holds(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[key]
}

// fakeNetns is a namespace "opened" from a path naming its inode:
// ".../netns/<inode>".
type fakeNetns struct{ inode uint32 }

func (n *fakeNetns) Inode() uint32 { return n.inode }
func (n *fakeNetns) Close() error  { return nil }

func openFakeNetns(path string) (Netns, error) {
	var inode uint32
	if _, err := fmt.Sscanf(filepath.Base(path), "%d", &inode); err != nil || inode == 0 {
		return nil, fmt.Errorf("no namespace at %s", path)
	}
	return &fakeNetns{inode: inode}, nil
}

// rig is a Manager on two simulated NICs, a fake controller and a real
// CDI writer, all under the test's temporary directory.
type rig struct {
	t      *testing.T
	m      *Manager
	leaser *fakeLeaser
	sims   map[string]*sim.Device
	cdiDir string
	state  string
	cfg    ManagerConfig
	// drv are the NICs' drivers and lease what the engine leases
	// through (leaser by default): a test swaps them before a restart.
	drv   engine.DriverMap
	lease engine.Leaser
	// pins, metrics and defaults are the engine's; nil: none.
	pins     engine.Pinner
	metrics  engine.Metrics
	defaults engine.Defaults
	// addrs and linker are the engine's hsn parts; nil: none, netlink.
	addrs  engine.AddressAllocator
	linker engine.Linker
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, leaser: newFakeLeaser(), sims: map[string]*sim.Device{}, cdiDir: filepath.Join(dir, "cdi"), state: filepath.Join(dir, "state"), drv: engine.DriverMap{}}
	r.lease = r.leaser
	r.defaults = engine.Defaults{TCs: cxi.DefaultTrafficClasses}
	for _, d := range []string{r.cdiDir, r.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cdispec.New(r.cdiDir, "hpe.com/cxi")
	if err != nil {
		t.Fatal(err)
	}
	var nics []NICDevice
	for _, name := range []string{"cxi0", "cxi1"} {
		s, err := sim.Open(filepath.Join(dir, "sim"), name, sim.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		r.sims[name] = s
		nics = append(nics, NICDevice{Name: name, DevPath: "/dev/" + name})
		r.drv[name] = cxi.NewClient(uapi.NewDevice(s))
	}
	r.cfg = ManagerConfig{
		Driver: testDriver, Node: "node-a", NICs: nics, CDI: w,
		OpenNetns: openFakeNetns,
		// The NRI connection is up: these tests are about the claims, and
		// the ones about readiness set their own.
		BindReady: func() error { return nil },
	}
	r.restart()
	return r
}

// restart makes a new Manager on the same state, as an agent restart does.
func (r *rig) restart() {
	r.t.Helper()
	// A new process: the record from disk, the holds from the record.
	st, err := checkpoint.Open(r.checkpointPath(), r.cfg.Node, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	var events event.Recorder
	if r.cfg.Events != nil {
		events = r.cfg.Events
	}
	eng, err := engine.New(engine.Config{
		Node: r.cfg.Node, Store: st, NICs: r.drv, Leaser: r.lease, Pins: r.pins, Metrics: r.metrics, Events: events,
		Addrs: r.addrs, Linker: r.linker,
		Defaults: func() engine.Defaults { return r.defaults },
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.cfg.Engine = eng
	m, err := NewManager(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
}

// get returns the record of claim uid.
func (r *rig) get(uid string) (Record, bool) { return r.m.eng.Get(checkpoint.ClaimID(uid)) }

// held is the inode held for claim uid; 0 for none.
func (r *rig) held(uid string) uint32 {
	return r.m.eng.Namespaces().Held(checkpoint.ClaimID(uid))
}

// checkpointPath is the agent's checkpoint, where the claims are recorded.
func (r *rig) checkpointPath() string { return filepath.Join(r.state, "checkpoint.json") }

// services are the simulated driver's services the agent made on nic.
func (r *rig) services(nic string) []sim.Service {
	r.t.Helper()
	svcs, err := r.sims[nic].Services()
	if err != nil {
		r.t.Fatal(err)
	}
	return slices.DeleteFunc(svcs, func(s sim.Service) bool { return s.Desc.SvcID == cxi.DefaultServiceID || s.Desc.IsSystemSvc })
}

func (r *rig) spec(uid string) (string, bool) {
	matches, _ := filepath.Glob(filepath.Join(r.cdiDir, "*"+uid+"*"))
	if len(matches) == 0 {
		return "", false
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b), true
}

// claim is an allocated claim of nics, reserved for pod, with an optional
// opaque configuration.
func claim(uid, pod string, config string, nics ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}},
		},
	}
	for _, n := range nics {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: testDriver, Pool: "node-a", Device: n})
	}
	if config != "" {
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(config)},
			}},
		}}
	}
	return c
}

func sandbox(pod string, inode uint32) Sandbox {
	return Sandbox{UID: "uid-" + pod, Namespace: "ns", Name: pod, NetnsPath: fmt.Sprintf("/var/run/netns/%d", inode)}
}

// nriConn is the runtime's NRI connection as the claims see it
// (nri.State): up or down, and why.
type nriConn struct {
	mu  sync.Mutex
	up  bool
	err error
}

func (c *nriConn) set(up bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up, c.err = up, err
}

// Ready is nil while up, as nri.State.Ready.
func (c *nriConn) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up {
		return nil
	}
	return fmt.Errorf("not connected to the runtime's NRI socket: %v", c.err)
}

package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// The defects of issue 24, each shown on the DRA front end.

// Defect 1: a second pod on a shared ResourceClaim ran with /dev/cxiN and
// the first pod's services. The kubelet prepares a claim once for all its
// pods, so the agent may hear of the second pod only through its
// containers, which carry the claim's marker from the CDI spec; when the
// kubelet does call Prepare again, the refreshed reservation refuses the
// second pod at its sandbox.
func TestDefect1SharedClaimSecondPodRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	c := claim("c1", "train-0", "", "cxi0")
	if _, err := r.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	rec, _ := r.get("c1")
	specEnv := r.m.env(rec) // what the CDI spec gives every container of the claim
	spec, _ := r.spec("c1")
	if !strings.Contains(spec, claimMarker(rec)) {
		t.Fatalf("the CDI spec lacks the claim's marker %s: %s", claimMarker(rec), spec)
	}

	// The second pod's sandbox: the kubelet did not prepare again, so the
	// agent does not know the pod; its container carries the claim.
	second := sandbox("train-1", 4026531901)
	if err := r.m.Bind(ctx, second); err != nil {
		t.Fatalf("a sandbox of a pod the agent does not know: %v", err)
	}
	_, err := r.m.Check(ctx, second, append([]string{"PATH=/bin"}, specEnv...))
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "ns/claim-c1") || !strings.Contains(err.Error(), "ResourceClaimTemplate") {
		t.Fatalf("second pod's container: %v, want a refusal naming the claim and the fix", err)
	}
	// The first pod's containers still start.
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531900), specEnv); err != nil {
		t.Fatalf("first pod's container: %v", err)
	}

	// A Prepare that sees both pods reserved refuses the second at its
	// sandbox.
	c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "train-1", UID: types.UID("uid-train-1")})
	if _, err := r.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	err = r.m.Bind(ctx, second)
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "ns/claim-c1") {
		t.Fatalf("second pod's sandbox after the refreshed Prepare: %v, want a refusal naming the claim", err)
	}
	if svcs := r.services("cxi0"); len(svcs) != 1 || len(svcs[0].NetNS) != 1 || svcs[0].NetNS[0] != 4026531900 {
		t.Fatalf("services %+v, want the first pod's namespace alone", svcs)
	}
}

// Defect 2: with NRI unreachable, pods ran on disabled, memberless
// services while the agent said it was ready. Prepare is refused while
// nothing can bind; once connected, Synchronize binds the running
// sandbox of a prepared claim that nothing bound.
func TestDefect2NRIUnreachableFailsClosed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	// The NRI connection's readiness, as nri.State answers it.
	var up atomic.Bool
	ready := func() error {
		if !up.Load() {
			return errors.New("the agent is not connected to the container runtime's NRI socket")
		}
		return nil
	}
	r.cfg.BindReady = ready
	r.restart()
	_, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0"))
	if err == nil || !strings.Contains(err.Error(), "NRI") {
		t.Fatalf("Prepare without NRI: %v, want a refusal naming NRI", err)
	}
	if len(r.services("cxi0")) != 0 || len(r.m.Records()) != 0 || r.leaser.holds("job/ns/train") {
		t.Fatal("a refused Prepare left a service, record or lease")
	}

	up.Store(true)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	// The sandbox started while the connection was down again: nothing
	// bound it. The runtime's Synchronize on reconnecting lists it.
	up.Store(false)
	sb := sandbox("train-0", 4026531900)
	rep := r.m.Synchronize(ctx, []Sandbox{sb, sandbox("unrelated", 4026531999)})
	if rep.Bound != 1 || rep.Failed != 0 {
		t.Fatalf("synchronize = %+v, want the claim bound", rep)
	}
	if _, err := r.m.Check(ctx, sb, nil); err != nil {
		t.Fatalf("container after synchronize: %v", err)
	}
	if r.held("c1") != 4026531900 {
		t.Fatal("the bound namespace is not held")
	}
}

// flakyBind binds through the driver, then reports a failure: the worst
// case of a bind that fails, the member taken and the error returned.
type flakyBind struct {
	engine.Driver
	mu   sync.Mutex
	fail bool
}

func (f *flakyBind) Bind(ctx context.Context, id, inode uint32) (cxi.Service, error) {
	svc, err := f.Driver.Bind(ctx, id, inode)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.fail {
		return svc, errors.New("enable: input/output error")
	}
	return svc, err
}

// Defect 3: a bind that failed on the second NIC left the first service
// enabled and admitting a namespace whose handle was closed, and the
// claim could never bind again.
func TestDefect3BindFailingOnSecondNICLeavesNoServiceAdmitting(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	flaky := &flakyBind{Driver: r.drv["cxi1"], fail: true}
	r.drv["cxi1"] = flaky
	r.restart()
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0", "cxi1")); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); !errors.Is(err, ErrNotBound) {
		t.Fatalf("bind failing on cxi1: %v, want ErrNotBound", err)
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		for _, s := range r.services(nic) {
			if len(s.NetNS) != 0 || s.Desc.Enable {
				t.Fatalf("%s: service %d admits %v enabled=%v after the failed bind, want unbound", nic, s.Desc.SvcID, s.NetNS, s.Desc.Enable)
			}
		}
	}
	if h := r.held("c1"); h != 0 {
		t.Fatalf("namespace %d still held with no service admitting it", h)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("container after the failed bind: %v, want ErrNotBound", err)
	}
	// The kubelet makes the sandbox again; the claim binds.
	flaky.mu.Lock()
	flaky.fail = false
	flaky.mu.Unlock()
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531901)); err != nil {
		t.Fatalf("bind after the failure: %v", err)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531901), nil); err != nil {
		t.Fatal(err)
	}
}

// blockingLeaser holds the acquires of one pod until released.
type blockingLeaser struct {
	*fakeLeaser
	pod     string
	entered chan struct{}
	release chan struct{}
}

func (b *blockingLeaser) AcquireJobVNI(ctx context.Context, pod controllerclient.PodRef) (controllerclient.Lease, error) {
	if pod.Name == b.pod {
		close(b.entered)
		select {
		case <-b.release:
		case <-ctx.Done():
			return controllerclient.Lease{}, ctx.Err()
		}
	}
	return b.fakeLeaser.AcquireJobVNI(ctx, pod)
}

// Defect 4: one lock was held across controller calls, so one slow
// answer stalled every Prepare and Unprepare on the node.
func TestDefect4SlowControllerStallsNoOtherClaim(t *testing.T) {
	r := newRig(t)
	bl := &blockingLeaser{fakeLeaser: r.leaser, pod: "slow-0", entered: make(chan struct{}), release: make(chan struct{})}
	r.lease = bl
	r.restart()
	m := r.m
	if _, err := m.Prepare(t.Context(), claim("old", "done-0", "", "cxi1")); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := m.Prepare(t.Context(), claim("slow", "slow-0", "", "cxi0"))
		slow <- err
	}()
	<-bl.entered
	// The slow acquire is in flight. A deadline turns a stall into a
	// failure rather than a hung test.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := m.Prepare(ctx, claim("fast", "fast-0", "", "cxi0")); err != nil {
		t.Fatalf("a claim of another job waited on the slow controller answer: %v", err)
	}
	if err := m.Unprepare(ctx, "old"); err != nil {
		t.Fatalf("an unprepare waited on the slow controller answer: %v", err)
	}
	close(bl.release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// Defect 5: state-write errors were swallowed: a bind whose record could
// not be written reported failure but left its services admitting the
// pod's namespace. It now leaves nothing admitting it.
func TestDefect5FailedWriteFailsTheBindAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0", "cxi1")); err != nil {
		t.Fatal(err)
	}
	// The record can no longer be written: its journal's path is a
	// non-empty directory (root ignores permissions).
	path := checkpoint.JournalPath(r.checkpointPath())
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := r.m.Bind(ctx, sandbox("train-0", 4026531900))
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "save checkpoint") {
		t.Fatalf("bind with an unwritable record: %v, want ErrNotBound from the write", err)
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		for _, s := range r.services(nic) {
			if len(s.NetNS) != 0 || s.Desc.Enable {
				t.Fatalf("%s: service %d admits %v enabled=%v after a bind that could not be recorded", nic, s.Desc.SvcID, s.NetNS, s.Desc.Enable)
			}
		}
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("container after the failed bind: %v, want ErrNotBound", err)
	}
}

// fakeClaims is the API server's claims, by namespace/name; err, when
// set, fails every read.
type fakeClaims struct {
	claims map[string]*resourceapi.ResourceClaim
	err    error
}

func (f *fakeClaims) GetClaim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	if f.err != nil {
		return nil, f.err
	}
	c, ok := f.claims[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
	}
	return c, nil
}

// Defect 7: DRA records were never checked against the API server, so a
// kubelet that lost its claim state leaked the VNI holds. A claim is
// collected on proof only: two successful reads, Grace apart, that no
// longer allocate it to this node; a failed read or a live claim never.
func TestDefect7LostClaimStateDoesNotLeakTheVNI(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	live := claim("live", "keep-0", "", "cxi0")
	lost := claim("lost", "gone-0", "", "cxi1")
	for _, c := range []*resourceapi.ResourceClaim{live, lost} {
		if _, err := r.m.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	api := &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{"ns/claim-live": live}}
	now := time.Now().Add(time.Hour) // past every record's creation grace
	col := &Collector{M: r.m, Claims: api, Grace: time.Minute, Now: func() time.Time { return now }}

	step := func(d time.Duration, wantCollected int) {
		t.Helper()
		now = now.Add(d)
		rep, err := col.Pass(ctx)
		if err != nil || rep.Collected != wantCollected {
			t.Fatalf("pass at +%v = %+v, %v; want %d collected", d, rep, err, wantCollected)
		}
	}
	step(0, 0)              // the first proof
	step(30*time.Second, 0) // the second, within the grace
	api.err = errors.New("apiserver unavailable")
	step(2*time.Minute, 0) // a failed read is no proof
	if _, ok := r.get("lost"); !ok {
		t.Fatal("collected without two proofs past the grace")
	}
	api.err = nil
	step(10*time.Second, 1) // the second proof past the grace
	if _, ok := r.get("lost"); ok {
		t.Fatal("the lost claim is still recorded")
	}
	if !r.leaser.holds("job/ns/keep") || r.leaser.holds("job/ns/gone") {
		t.Fatalf("leases held: %v; want keep's alone", r.leaser.held)
	}
	if len(r.services("cxi1")) != 0 || len(r.services("cxi0")) != 1 {
		t.Fatal("services: want the lost claim's destroyed, the live one's kept")
	}
}

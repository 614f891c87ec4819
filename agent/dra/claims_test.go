package dra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// TestClaimLifecycle follows one claim: prepared services admit nobody
// and are disabled, a container cannot start before the bind, the bind
// admits the sandbox's namespace alone, Unprepare leaves nothing.
func TestClaimLifecycle(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	c := claim("c1", "train-0", "", "cxi0", "cxi1")

	devs, err := r.m.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || len(devs[0].CDIDeviceIDs) != 1 || devs[0].CDIDeviceIDs[0] != "hpe.com/cxi=claim-c1" || len(devs[1].CDIDeviceIDs) != 0 {
		t.Fatalf("devices = %+v, want two, the first with the claim's CDI device", devs)
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		svcs := r.services(nic)
		if len(svcs) != 1 || svcs[0].Desc.Enable || len(svcs[0].NetNS) != 0 || !svcs[0].Desc.RestrictedMembers {
			t.Fatalf("%s after prepare: %+v, want one disabled service admitting nobody", nic, svcs)
		}
	}
	spec, ok := r.spec("c1")
	if !ok || !strings.Contains(spec, "SLINGSHOT_VNIS=2000") || !strings.Contains(spec, "/dev/cxi1") || !strings.Contains(spec, "SLINGSHOT_DEVICES=cxi0,cxi1") {
		t.Fatalf("CDI spec = %q, want the VNI, both devices and their nodes", spec)
	}

	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("container before the bind: %v, want ErrNotBound", err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		svcs := r.services(nic)
		if len(svcs) != 1 || !svcs[0].Desc.Enable || !slices.Equal(svcs[0].NetNS, []uint32{4026531900}) {
			t.Fatalf("%s after bind: %+v, want enabled with the sandbox's namespace alone", nic, svcs)
		}
	}
	env, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil)
	if err != nil || !slices.Contains(env, "SLINGSHOT_VNIS=2000") {
		t.Fatalf("check = %v, %v; want the environment", env, err)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531901), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("check in another namespace: %v, want ErrNotBound", err)
	}
	if err := r.m.Bind(ctx, Sandbox{UID: "uid-other", Name: "other"}); err != nil {
		t.Fatalf("a pod without claims: %v", err)
	}

	if err := r.m.Unprepare(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	r.checkEmpty()
	if err := r.m.Unprepare(ctx, "c1"); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
}

// checkEmpty: no service, spec, record or held lease is left.
func (r *rig) checkEmpty() {
	r.t.Helper()
	for nic := range r.sims {
		if svcs := r.services(nic); len(svcs) != 0 {
			r.t.Errorf("%s: services left: %+v", nic, svcs)
		}
	}
	if recs := r.m.Records(); len(recs) != 0 {
		r.t.Errorf("records left: %+v", recs)
	}
	r.leaser.mu.Lock()
	defer r.leaser.mu.Unlock()
	if len(r.leaser.held) != 0 {
		r.t.Errorf("leases still held: %v", r.leaser.held)
	}
}

func TestHostNetworkPodIsRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	sb := sandbox("train-0", 0)
	sb.NetnsPath = ""
	err := r.m.Bind(ctx, sb)
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "hostNetwork") {
		t.Fatalf("bind of a host-network pod: %v, want ErrNotBound naming hostNetwork", err)
	}
	if svcs := r.services("cxi0"); svcs[0].Desc.Enable {
		t.Fatalf("the service was enabled: %+v", svcs)
	}
}

// TestSandboxRecreated: a new sandbox's namespace gets new services on
// the same VNI; the old namespace is admitted nowhere.
func TestSandboxRecreated(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531950)); err != nil {
		t.Fatal(err)
	}
	svcs := r.services("cxi0")
	if len(svcs) != 1 || !slices.Equal(svcs[0].NetNS, []uint32{4026531950}) || svcs[0].Desc.VNIs[0] != 2000 {
		t.Fatalf("after the new sandbox: %+v, want one service (made again; the driver may reuse its ID) on VNI 2000 admitting the new namespace alone", svcs)
	}
	env, err := r.m.Check(ctx, sandbox("train-0", 4026531950), nil)
	want := fmt.Sprintf("SLINGSHOT_SVC_IDS=%d", svcs[0].Desc.SvcID)
	if err != nil || !slices.Contains(env, want) {
		t.Fatalf("check = %v, %v; want %s", env, err, want)
	}
	if spec, _ := r.spec("c1"); !strings.Contains(spec, want) {
		t.Fatalf("the CDI spec still names the old service: %s", spec)
	}
}

// TestJobClaimsShareOneLease: the claims of two pods of a job carry one
// VNI; the node gives the lease back with the last of them.
func TestJobClaimsShareOneLease(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for i, pod := range []string{"train-0", "train-1"} {
		if _, err := r.m.Prepare(ctx, claim(fmt.Sprint("c", i), pod, "", "cxi0")); err != nil {
			t.Fatal(err)
		}
	}
	other := claim("c9", "train-1", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"claim:storage","envSuffix":"STORAGE"}`, "cxi0")
	if _, err := r.m.Prepare(ctx, other); err != nil {
		t.Fatal(err)
	}
	vnis := map[uint16]int{}
	for _, s := range r.services("cxi0") {
		vnis[s.Desc.VNIs[0]]++
	}
	if vnis[2000] != 2 || vnis[2001] != 1 {
		t.Fatalf("VNIs of the services: %v, want 2000 twice (the job) and 2001 once (the storage domain)", vnis)
	}
	if spec, _ := r.spec("c9"); !strings.Contains(spec, "SLINGSHOT_VNIS_STORAGE=2001") {
		t.Fatalf("the second domain's spec: %s", spec)
	}
	if err := r.m.Unprepare(ctx, "c0"); err != nil {
		t.Fatal(err)
	}
	if !r.leaser.holds("job/ns/train") {
		t.Fatal("the job's lease was released while another claim of it runs here")
	}
	for _, uid := range []string{"c1", "c9"} {
		if err := r.m.Unprepare(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	r.checkEmpty()
}

// TestUnprepareRetriesWhatFailed: a release the controller refuses keeps
// the record; the kubelet's next call finishes it, and a Prepare meanwhile
// starts afresh.
func TestUnprepareRetriesWhatFailed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	r.leaser.failRel = true
	if err := r.m.Unprepare(ctx, "c1"); err == nil {
		t.Fatal("unprepare with the controller down succeeded")
	}
	if len(r.services("cxi0")) != 0 {
		t.Fatal("the services should be gone already")
	}
	r.restart() // the record survives a restart
	r.leaser.failRel = false
	if err := r.m.Unprepare(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	r.checkEmpty()
}

// TestRestartAndReboot: a restarted agent keeps a bound claim as it is;
// after a reboot (the driver lost every service) a repeated Prepare makes
// the services and the spec again.
func TestRestartAndReboot(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	before := r.services("cxi0")
	r.restart()
	rep, err := r.m.Reconcile(ctx, 1024, 65535)
	if err != nil || rep.Kept != 1 || rep.Recreated != 0 {
		t.Fatalf("reconcile = %+v, %v; want one kept", rep, err)
	}
	if after := r.services("cxi0"); len(after) != 1 || after[0].Desc.SvcID != before[0].Desc.SvcID || !after[0].Desc.Enable {
		t.Fatalf("after the restart: %+v, want %+v unchanged", after, before)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531900), nil); err != nil {
		t.Fatalf("a container after the restart: %v", err)
	}

	// A reboot: the driver forgets every service.
	drv := r.drv["cxi0"]
	if err := drv.Destroy(ctx, before[0].Desc.SvcID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	svcs := r.services("cxi0")
	if len(svcs) != 1 || svcs[0].Desc.Enable || len(svcs[0].NetNS) != 0 {
		t.Fatalf("after the repeated prepare: %+v, want one unbound service", svcs)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531990)); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileDestroysUnrecordedUnboundServices: a Prepare that crashed
// between making a service and recording it leaves a disabled service
// admitting nobody; nobody can use it, and Reconcile removes it. Another
// program's service is left alone.
func TestReconcileDestroysUnrecordedUnboundServices(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	drv := r.drv["cxi0"]
	if _, err := drv.CreateUnbound(ctx, cxi.ServiceSpec{VNIs: []uint16{3000}, TCs: cxi.DefaultTrafficClasses}); err != nil {
		t.Fatal(err)
	}
	foreign, err := drv.(*cxi.Client).Create(ctx, cxi.ServiceSpec{VNIs: []uint16{3001}, TCs: cxi.DefaultTrafficClasses, Members: []cxi.Member{{Type: cxi.MemberUID, ID: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.m.Reconcile(ctx, 1024, 65535)
	if err != nil || rep.Orphans != 1 {
		t.Fatalf("reconcile = %+v, %v; want one orphan destroyed", rep, err)
	}
	if svcs := r.services("cxi0"); len(svcs) != 1 || svcs[0].Desc.SvcID != foreign.ID {
		t.Fatalf("left: %+v, want the foreign service alone", svcs)
	}
}

// TestRetriedPrepareRacesUnprepare runs a Prepare, its retry and an
// Unprepare of one claim at once, many times, with a bind now and then,
// and checks after every round that the claim is whole or wholly gone:
// no service without its record, no record without its services, spec
// and lease, no VNI on two jobs.
func TestRetriedPrepareRacesUnprepare(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 60 {
		uid := fmt.Sprint("c", round%3)
		pod := fmt.Sprintf("job%d-%d", round%2, round%3)
		c := claim(uid, pod, "", "cxi0", "cxi1")
		ops := []func(){
			func() { _, _ = r.m.Prepare(ctx, c) },
			func() { _, _ = r.m.Prepare(ctx, c) },
			func() { _ = r.m.Unprepare(ctx, uid) },
			func() { _ = r.m.Bind(ctx, sandbox(pod, uint32(4026532000+round))) },
		}
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		var wg sync.WaitGroup
		for _, op := range ops[:2+rng.IntN(3)] {
			wg.Go(op)
		}
		wg.Wait()
		r.checkInvariants(round)
	}
	for _, rec := range r.m.Records() {
		if err := r.m.Unprepare(ctx, rec.UID); err != nil {
			t.Fatal(err)
		}
	}
	r.checkEmpty()
}

// checkInvariants checks the records against the driver, the specs and
// the controller.
func (r *rig) checkInvariants(round int) {
	r.t.Helper()
	recorded := map[string]map[uint32]string{}
	jobOf := map[uint16]string{}
	for _, rec := range r.m.Records() {
		if !rec.Prepared || rec.Unpreparing {
			r.t.Fatalf("round %d: claim %s left half-done: %+v", round, rec.UID, rec)
		}
		if _, ok := r.spec(rec.UID); !ok {
			r.t.Fatalf("round %d: claim %s has no CDI spec", round, rec.UID)
		}
		if !r.leaser.holds(rec.LeaseKey) {
			r.t.Fatalf("round %d: claim %s runs on VNI %d whose lease %s the node gave back", round, rec.UID, rec.VNI, rec.LeaseKey)
		}
		if j, ok := jobOf[rec.VNI]; ok && j != rec.LeaseKey {
			r.t.Fatalf("round %d: VNI %d carried by %s and %s", round, rec.VNI, j, rec.LeaseKey)
		}
		jobOf[rec.VNI] = rec.LeaseKey
		if len(rec.Services) != 2 {
			r.t.Fatalf("round %d: claim %s has %d services, want 2", round, rec.UID, len(rec.Services))
		}
		for _, s := range rec.Services {
			if recorded[s.NIC] == nil {
				recorded[s.NIC] = map[uint32]string{}
			}
			recorded[s.NIC][s.ID] = rec.UID
		}
	}
	for nic := range r.sims {
		live := r.services(nic)
		if len(live) != len(recorded[nic]) {
			r.t.Fatalf("round %d: %s has %d services, the records %d", round, nic, len(live), len(recorded[nic]))
		}
		for _, s := range live {
			if _, ok := recorded[nic][s.Desc.SvcID]; !ok {
				r.t.Fatalf("round %d: service %d on %s has no record", round, s.Desc.SvcID, nic)
			}
			if s.Open || len(s.UIDs)+len(s.GIDs) > 0 || len(s.NetNS) > 1 {
				r.t.Fatalf("round %d: service %d on %s admits %+v", round, s.Desc.SvcID, nic, s)
			}
		}
	}
}

// A pod with two claims that both set the plain SLINGSHOT_* names is
// refused at its sandbox with a message naming envSuffix, before the
// runtime's own clash check refuses it without saying why; with an
// envSuffix on one, it binds.
func TestTwoClaimsWithoutEnvSuffixRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for _, c := range []*resourceapi.ResourceClaim{claim("c1", "train-0", "", "cxi0"), claim("c2", "train-0", "", "cxi1")} {
		if _, err := r.m.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	err := r.m.Bind(ctx, sandbox("train-0", 4026531900))
	if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), "envSuffix") || !strings.Contains(err.Error(), "ns/claim-c1") {
		t.Fatalf("bind of two unsuffixed claims: %v, want a refusal naming envSuffix and the claims", err)
	}
	if err := r.m.Unprepare(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	cfg := `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","envSuffix":"STORAGE"}`
	if _, err := r.m.Prepare(ctx, claim("c3", "train-0", cfg, "cxi1")); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatalf("bind with an envSuffix on one claim: %v", err)
	}
}

// Issue 32, defect 5: a bind at the sandbox replacing a service that
// stays busy (EBUSY) retried its destroy for the driver client's whole
// round (about 6 s), past the time the runtime gives an NRI request
// (containerd's plugin_request_timeout, 2 s). It now answers within its
// budget, the sandbox fails without a container started unbound, and a
// sandbox made again once the service is free binds and runs.
func TestBindAtTheSandboxAnswersWithinItsBudget(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	// The first bind under the default budget: on a loaded machine its
	// save and bind alone may take more than the short one below.
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	// A process of the old sandbox still holds an LNI on the service.
	old := r.services("cxi0")[0].Desc.SvcID
	if err := r.sims["cxi0"].SetInUse(old, 1); err != nil {
		t.Fatal(err)
	}
	r.m.cfg.BindBudget = 100 * time.Millisecond
	start := time.Now()
	err := r.m.Bind(ctx, sandbox("train-0", 4026531950))
	// The client's destroy round lasts seconds: a bind that waited for it
	// would take them all.
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the bind took %v with a 100ms budget", took)
	}
	if !errors.Is(err, ErrNotBound) {
		t.Fatalf("bind replacing a busy service: %v, want ErrNotBound", err)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531950), nil); !errors.Is(err, ErrNotBound) {
		t.Fatalf("a container of the unbound sandbox: %v, want refused", err)
	}
	for _, s := range r.services("cxi0") {
		if slices.Contains(s.NetNS, 4026531950) {
			t.Fatalf("service %d admits the new namespace after the failed bind", s.Desc.SvcID)
		}
	}
	// The old sandbox's process is gone; the kubelet makes the sandbox
	// again. The budget is a real one's now: this bind's replace, save
	// and bind take more than 100ms on a loaded machine.
	if err := r.sims["cxi0"].SetInUse(old, 0); err != nil {
		t.Fatal(err)
	}
	r.m.cfg.BindBudget = DefaultBindBudget
	if err := r.m.Bind(ctx, sandbox("train-0", 4026531960)); err != nil {
		t.Fatalf("bind once the service is free: %v", err)
	}
	if _, err := r.m.Check(ctx, sandbox("train-0", 4026531960), nil); err != nil {
		t.Fatalf("a container of the bound sandbox: %v", err)
	}
}

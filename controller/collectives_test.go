package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
)

// These tests run the controller over its sqlite store against the fake
// fabric manager over real HTTP, through the real client with OAuth.

type fmEnv struct {
	fm  *fakefm.FM
	srv *httptest.Server
	cfg *CollectivesConfig
}

func newFMEnv(t *testing.T) *fmEnv {
	t.Helper()
	fm := fakefm.New(fakefm.Options{ClientID: "slingshot", ClientSecret: "s3cret"})
	srv := httptest.NewServer(fm)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	for name, v := range map[string]string{hwcoll.OAuthEndpointFile: srv.URL + fakefm.TokenPath,
		hwcoll.OAuthClientIDFile: "slingshot", hwcoll.OAuthClientSecretFile: "s3cret"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := hwcoll.New(hwcoll.Options{URL: srv.URL, OAuthDir: dir, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	noWait := func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	return &fmEnv{fm: fm, srv: srv, cfg: &CollectivesConfig{FM: c, JobPrefix: "k8s", AddrsPerJob: 8, MinNodes: 2,
		JobURL: "https://fm.example:8000", Retry: backoff.Policy{Attempts: 3, Wait: noWait}, ReconcileInterval: time.Hour}}
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func (e *fmEnv) jobs() map[string]fakefm.Job { return e.fm.Jobs() }

// listed waits until n listings (the reconcile at each start) were
// answered, so that failures injected after it reach the calls the test
// means.
func (e *fmEnv) listed(t *testing.T, n int) {
	t.Helper()
	eventually(t, "the reconcile's listing", func() bool {
		seen := 0
		for _, c := range e.fm.Calls() {
			if c.Method == http.MethodGet && c.Path == fakefm.JobsPath+"/" && c.Status != 0 {
				seen++
			}
		}
		return seen >= n
	})
}

func (e *fmEnv) calls(method string) int {
	n := 0
	for _, c := range e.fm.Calls() {
		if c.Method == method && c.Path != fakefm.TokenPath {
			n++
		}
	}
	return n
}

// endJob releases every node's hold and finalizes the owner.
func endJob(t *testing.T, svc *Allocator, res *fakeResolver, owner *store.Owner, key string, nodes ...string) {
	t.Helper()
	ctx := t.Context()
	for _, n := range nodes {
		if _, err := svc.ReleaseJobVNI(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	res.setExists(owner.Namespace, owner.Name, false)
	if _, done, err := svc.FinalizeOwner(ctx, *owner, true); err != nil || !done {
		t.Fatalf("finalize: done %v, %v", done, err)
	}
}

func TestCollectivesOneReservationPerJob(t *testing.T) {
	e := newFMEnv(t)
	h := newHarness(t, Config{Collectives: e.cfg})
	ctx := t.Context()
	train, eval := job("ml", "train"), job("ml", "eval")
	for i := range 4 {
		h.res.addPod("ml", fmt.Sprintf("train-%d", i), train, "")
	}
	h.res.addPod("ml", "eval-0", eval, "")
	h.res.addPod("ml", "solo", nil, "pod")

	var first *Collectives
	var key string
	for i, node := range []string{"n1", "n1", "n2", "n3"} {
		l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: fmt.Sprintf("train-%d", i)}, node)
		if err != nil {
			t.Fatal(err)
		}
		if l.Collectives == nil {
			t.Fatalf("pod %d: job lease without collectives", i)
		}
		if first == nil {
			first, key = l.Collectives, l.Key
		} else if *l.Collectives != *first {
			t.Fatalf("pod %d: collectives %+v, the job's first pod got %+v", i, *l.Collectives, *first)
		}
	}
	fmJob, ok := e.jobs()["k8s-uid-train"]
	if !ok || e.fm.Created() != 1 {
		t.Fatalf("fabric manager jobs %v, %d created: want one, k8s-uid-train", e.jobs(), e.fm.Created())
	}
	want := Collectives{JobID: "k8s-uid-train", JobStepID: "0", Token: fmJob.SessionToken,
		FabricMgrURL: "https://fm.example:8000/fabric/collectives/multicasts", AddrsPerJob: 8, MinNodes: 2}
	if *first != want || fmJob.MCastLimit != 8 {
		t.Fatalf("collectives %+v (mcastLimit %d), want %+v (8)", *first, fmJob.MCastLimit, want)
	}
	// Only the first node's acquire asked the fabric manager.
	if n := e.calls(http.MethodPost); n != 1 {
		t.Fatalf("%d POSTs, want 1", n)
	}

	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "eval-0"}, "n1"); err != nil || l.Collectives == nil || l.Collectives.JobID != "k8s-uid-eval" {
		t.Fatalf("second job: %+v, %v", l, err)
	}
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "solo"}, "n1"); err != nil || l.Collectives != nil {
		t.Fatalf("pod-scoped lease: %+v, %v; want no collectives", l, err)
	}
	if len(e.jobs()) != 2 {
		t.Fatalf("fabric manager jobs %v, want train and eval", e.jobs())
	}

	endJob(t, h.svc, h.res, train, key, "n1", "n2", "n3")
	eventually(t, "the train job's release", func() bool { _, ok := e.jobs()["k8s-uid-train"]; return !ok })
	if _, ok := e.jobs()["k8s-uid-eval"]; !ok {
		t.Fatal("the eval job's reservation went with the train job's")
	}
}

func TestCollectivesRetryAndFailClosed(t *testing.T) {
	e := newFMEnv(t)
	h := newHarness(t, Config{Collectives: e.cfg})
	e.listed(t, 1)
	ctx := t.Context()
	h.res.addPod("ml", "a-0", job("ml", "a"), "")
	h.res.addPod("ml", "b-0", job("ml", "b"), "")

	// Two 500s: the third attempt passes.
	e.fm.FailNext(http.MethodPost, 2, http.StatusInternalServerError)
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "a-0"}, "n1"); err != nil || l.Collectives == nil {
		t.Fatalf("after two 500s: %+v, %v", l, err)
	}

	// Failing past the attempts fails the acquire, and leaves no
	// reservation; the lease stays and the next acquire reserves.
	e.fm.FailNext("", 3, http.StatusServiceUnavailable)
	_, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "b-0"}, "n1")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fabric manager down: %v; want ErrUnavailable", err)
	}
	if _, ok := e.jobs()["k8s-uid-b"]; ok {
		t.Fatal("a reservation exists though every call failed")
	}
	l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "b-0"}, "n1")
	if err != nil || l.Collectives == nil {
		t.Fatalf("after recovery: %+v, %v", l, err)
	}

	// A refusal is not retried and fails closed.
	e.fm.RevokeTokens()
	e.fm.FailNext("", 2, http.StatusForbidden) // the refused call and the one after a fresh token
	h.res.addPod("ml", "c-0", job("ml", "c"), "")
	before := e.calls(http.MethodGet)
	_, err = h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "c-0"}, "n1")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, hwcoll.ErrUnauthorized) {
		t.Fatalf("refused: %v; want ErrUnavailable wrapping ErrUnauthorized", err)
	}
	if n := e.calls(http.MethodGet) - before; n != 2 {
		t.Fatalf("%d GETs for a refused reserve, want 2 (one with a fresh token, no retry)", n)
	}
	// Reserve calls: a-0 two failed and one ok, b-0 three failed and one
	// ok, c-0 one failed.
	ok, failed := testutil.ToFloat64(h.svc.m.hwcoll.WithLabelValues("reserve", "ok")), testutil.ToFloat64(h.svc.m.hwcoll.WithLabelValues("reserve", "error"))
	if ok != 2 || failed != 6 {
		t.Fatalf("slingshot_controller_hwcoll_calls_total reserve: %v ok, %v error; want 2 and 6", ok, failed)
	}
}

// A controller killed after the fabric manager made a reservation and
// before it answered leaks nothing: the lease recorded the
// reservation's name before asking, so the restarted controller finds
// the same reservation, hands out its token and releases it at the
// job's end.
func TestCollectivesKilledBetweenReserveAndAnswer(t *testing.T) {
	e := newFMEnv(t)
	clk, res, path := newClock(), newFakeResolver(), filepath.Join(t.TempDir(), "c.db")
	cfg := Config{Collectives: e.cfg, Now: clk.Now}
	svc, stop := start(t, path, res, cfg)
	train := job("ml", "train")
	res.addPod("ml", "train-0", train, "")
	res.addPod("ml", "train-1", train, "")

	hold := e.fm.Hold(http.MethodPost, fakefm.JobsPath)
	callCtx, cancelCall := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := svc.AcquireJobVNI(callCtx, PodRef{Namespace: "ml", Name: "train-0"}, "n1")
		done <- err
	}()
	select {
	case <-hold.Arrived():
	case err := <-done:
		t.Fatalf("acquire returned before the fabric manager got the POST: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no POST reached the fabric manager")
	}
	// The process dies: its calls end with it, then the service.
	cancelCall()
	if err := <-done; err == nil {
		t.Fatal("the killed acquire succeeded")
	}
	stop()
	hold.Release()
	if len(e.jobs()) != 1 {
		t.Fatalf("fabric manager jobs %v, want the one made before the kill", e.jobs())
	}

	svc, _ = start(t, path, res, cfg)
	l, err := svc.AcquireJobVNI(t.Context(), PodRef{Namespace: "ml", Name: "train-1"}, "n2")
	if err != nil {
		t.Fatal(err)
	}
	fmJob := e.jobs()["k8s-uid-train"]
	if l.Collectives == nil || l.Collectives.Token != fmJob.SessionToken || e.fm.Created() != 1 {
		t.Fatalf("after restart: collectives %+v, %d created; want the first reservation's token %q", l.Collectives, e.fm.Created(), fmJob.SessionToken)
	}
	endJob(t, svc, res, train, l.Key, "n1", "n2")
	eventually(t, "the release", func() bool { return len(e.jobs()) == 0 })
}

// A controller killed after it freed a job's lease and before the
// fabric manager released the reservation leaks nothing: the restarted
// controller lists the reservations and releases those of no lease,
// and only its own.
func TestCollectivesKilledBetweenFreeAndRelease(t *testing.T) {
	e := newFMEnv(t)
	clk, res, path := newClock(), newFakeResolver(), filepath.Join(t.TempDir(), "c.db")
	cfg := Config{Collectives: e.cfg, Now: clk.Now}
	svc, stop := start(t, path, res, cfg)
	ctx := t.Context()
	// Real owners have RFC 4122 UIDs; the reconcile releases only
	// reservations named by one.
	train, keep := job("ml", "train"), job("ml", "keep")
	train.UID, keep.UID = "0f5e7a52-64d4-4d0e-9d6b-2a4fbc1d0001", "0f5e7a52-64d4-4d0e-9d6b-2a4fbc1d0002"
	res.addPod("ml", "train-0", train, "")
	res.addPod("ml", "keep-0", keep, "")
	l, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "train-0"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "keep-0"}, "n1"); err != nil {
		t.Fatal(err)
	}
	// Reservations of another cluster and of Slurm share the fabric
	// manager.
	other, err := hwcoll.New(hwcoll.Options{URL: e.srv.URL, OAuthDir: oauthDirOf(t, e)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"k8s2-uid-x", "slurm-42", "k8s-east-0f5e7a52-64d4-4d0e-9d6b-2a4fbc1d0003"} {
		if _, err := other.Reserve(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
	}

	e.fm.FailNext(http.MethodDelete, 1000, http.StatusServiceUnavailable)
	endJob(t, svc, res, train, l.Key, "n1")
	eventually(t, "a DELETE attempt", func() bool { return e.calls(http.MethodDelete) > 0 })
	stop()
	e.fm.ClearFailures()
	trainID, keepID := "k8s-"+train.UID, "k8s-"+keep.UID
	if _, ok := e.jobs()[trainID]; !ok {
		t.Fatal("the reservation was released though every DELETE failed")
	}

	start(t, path, res, cfg)
	eventually(t, "the orphan's release", func() bool { _, ok := e.jobs()[trainID]; return !ok })
	for _, id := range []string{keepID, "k8s2-uid-x", "slurm-42", "k8s-east-0f5e7a52-64d4-4d0e-9d6b-2a4fbc1d0003"} {
		if _, ok := e.jobs()[id]; !ok {
			t.Errorf("reconcile released %s, which is live or not this controller's", id)
		}
	}
}

// oauthDirOf returns a credentials directory for the fake's client.
func oauthDirOf(t *testing.T, e *fmEnv) string {
	dir := t.TempDir()
	for name, v := range map[string]string{hwcoll.OAuthEndpointFile: e.srv.URL + fakefm.TokenPath,
		hwcoll.OAuthClientIDFile: "slingshot", hwcoll.OAuthClientSecretFile: "s3cret"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Leases made while collectives were off carry none, and a lease made by
// the sync hook reserves at its first node's acquire.
func TestCollectivesOnlyForJobLeasesAskedByNodes(t *testing.T) {
	e := newFMEnv(t)
	h := newHarness(t, Config{Collectives: e.cfg})
	ctx := t.Context()
	owner := *job("ml", "hooked")
	l, err := h.svc.AcquireOwnerVNI(ctx, owner, Policy{Mode: ModeJob})
	if err != nil || l.Collectives != nil || len(e.jobs()) != 0 {
		t.Fatalf("sync hook: %+v, %v, fabric manager %v; want the lease and no reservation yet", l, err, e.jobs())
	}
	h.res.addPod("ml", "hooked-0", &owner, "")
	l, err = h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "ml", Name: "hooked-0"}, "n1")
	if err != nil || l.Collectives == nil || l.Collectives.JobID != "k8s-uid-hooked" {
		t.Fatalf("first node: %+v, %v", l, err)
	}
}

func TestCollectivesConfigValidate(t *testing.T) {
	good := func() *CollectivesConfig {
		return &CollectivesConfig{FM: &hwcoll.Client{}, JobPrefix: "k8s", AddrsPerJob: 1, MinNodes: 1, JobURL: "https://fm"}
	}
	tests := map[string]func(*CollectivesConfig){
		"no fm":        func(c *CollectivesConfig) { c.FM = nil },
		"bad prefix":   func(c *CollectivesConfig) { c.JobPrefix = "K8S_" },
		"empty prefix": func(c *CollectivesConfig) { c.JobPrefix = "" },
		"zero addrs":   func(c *CollectivesConfig) { c.AddrsPerJob = 0 },
		"zero nodes":   func(c *CollectivesConfig) { c.MinNodes = 0 },
		"no job url":   func(c *CollectivesConfig) { c.JobURL = "" },
	}
	if err := (Config{Collectives: good()}).Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := good()
			mutate(c)
			if err := (Config{Collectives: c}).Validate(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

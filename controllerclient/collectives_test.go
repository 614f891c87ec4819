package controllerclient_test

import (
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
	"google.golang.org/grpc"
)

// A job's pods on two nodes get the job's one reservation over the wire,
// and the agent's environment for it; a pod-scoped lease gets none.
func TestCollectivesOverTheWire(t *testing.T) {
	fm := fakefm.New(fakefm.Options{})
	srv := httptest.NewServer(fm)
	t.Cleanup(srv.Close)
	fmc, err := hwcoll.New(hwcoll.Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	noWait := func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := controllertest.NewJobs()
	train := controllertest.Job("a", "train")
	jobs.Add("w-0", train)
	jobs.Add("w-1", train)
	jobs.Add("solo", controllertest.Job("a", "solo"))
	jobs.SetPolicy("a", "solo", controller.Policy{Mode: controller.ModePod})
	svc, _ := controllertest.Start(t, st, jobs, controller.Config{Collectives: &controller.CollectivesConfig{
		FM: fmc, JobPrefix: "k8s", AddrsPerJob: 6, MinNodes: 2, JobURL: "https://fm.hsn:8000",
		Retry: backoff.Policy{Attempts: 2, Wait: noWait}, ReconcileInterval: time.Hour}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	grpcapi.NewServer(svc, time.Minute).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	dial := func(node string) *controllerclient.Client {
		c, err := controllerclient.Dial(lis.Addr().String(), controllerclient.Options{Node: node, Retry: backoff.Policy{Attempts: 2, Wait: noWait}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	n1, n2 := dial("n1"), dial("n2")

	l1, err := n1.AcquireJobVNI(t.Context(), controllerclient.PodRef{Namespace: "a", Name: "w-0", UID: "u0"})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := n2.AcquireJobVNI(t.Context(), controllerclient.PodRef{Namespace: "a", Name: "w-1", UID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	id := "k8s-" + train.UID
	fmJob, ok := fm.Jobs()[id]
	if !ok || fm.Created() != 1 {
		t.Fatalf("fabric manager jobs %v: want one, %s", fm.Jobs(), id)
	}
	want := []string{
		"FI_CXI_COLL_JOB_ID=" + id,
		"FI_CXI_COLL_JOB_STEP_ID=0",
		"FI_CXI_COLL_MCAST_TOKEN=" + fmJob.SessionToken,
		"FI_CXI_COLL_FABRIC_MGR_URL=https://fm.hsn:8000/fabric/collectives/multicasts",
		"FI_CXI_HWCOLL_ADDRS_PER_JOB=6",
		"FI_CXI_HWCOLL_MIN_NODES=2",
	}
	for node, l := range map[string]controllerclient.Lease{"n1": l1, "n2": l2} {
		if got := engine.CollectivesEnv(l); !slices.Equal(got, want) {
			t.Errorf("%s: env %q, want %q", node, got, want)
		}
	}
	solo, err := n1.AcquireJobVNI(t.Context(), controllerclient.PodRef{Namespace: "a", Name: "solo", UID: "us"})
	if err != nil || solo.Collectives != nil || engine.CollectivesEnv(solo) != nil {
		t.Fatalf("pod-scoped lease: %+v, %v; want no collectives", solo, err)
	}
}

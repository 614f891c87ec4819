package dra

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// collLeaser answers every lease with a hardware-collectives reservation,
// as the controller does for a job lease while collectives are on.
type collLeaser struct{ *fakeLeaser }

func (l collLeaser) AcquireJobVNI(ctx context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	lease, err := l.fakeLeaser.AcquireJobVNI(ctx, p)
	lease.Collectives = &controllerclient.Collectives{JobID: "k8s-uid-train", JobStepID: "0", Token: "session-7",
		FabricMgrURL: "https://fm/fabric/collectives/multicasts", AddrsPerJob: 8, MinNodes: 2}
	return lease, err
}

// The DRA path puts a job lease's collectives in the claim's CDI spec and
// the container's environment, and keeps them with the claim's record.
func TestPrepareCarriesCollectives(t *testing.T) {
	r := newRig(t)
	r.lease = collLeaser{r.leaser}
	r.restart()
	m := r.m
	ctx := t.Context()
	if _, err := m.Prepare(ctx, claim("c1", "train-0", "", "cxi0")); err != nil {
		t.Fatal(err)
	}
	spec, ok := r.spec("c1")
	if !ok || !strings.Contains(spec, "FI_CXI_COLL_MCAST_TOKEN=session-7") || !strings.Contains(spec, "FI_CXI_COLL_JOB_ID=k8s-uid-train") {
		t.Fatalf("CDI spec = %q, want the job's collectives", spec)
	}
	if err := m.Bind(ctx, sandbox("train-0", 4026531900)); err != nil {
		t.Fatal(err)
	}
	env, err := m.Check(ctx, sandbox("train-0", 4026531900), nil)
	if err != nil || !slices.Contains(env, "FI_CXI_HWCOLL_ADDRS_PER_JOB=8") || !slices.Contains(env, "SLINGSHOT_VNIS=2000") {
		t.Fatalf("check = %v, %v; want SLINGSHOT_* and the collectives", env, err)
	}
	recs := m.Records()
	if len(recs) != 1 || len(recs[0].CollEnv) != 6 {
		t.Fatalf("records %+v, want the claim's collectives environment", recs)
	}
}

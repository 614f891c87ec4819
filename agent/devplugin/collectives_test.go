package devplugin

import (
	"context"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// collLeaser answers every lease with a hardware-collectives reservation,
// as the controller does for a job lease while collectives are on.
type collLeaser struct{ *fakeLeaser }

func (l collLeaser) AcquireJobVNI(ctx context.Context, p controllerclient.PodRef) (controllerclient.Lease, error) {
	lease, err := l.fakeLeaser.AcquireJobVNI(ctx, p)
	lease.Collectives = &controllerclient.Collectives{JobID: "k8s-uid-j", JobStepID: "0", Token: "session-1",
		FabricMgrURL: "https://fm/fabric/collectives/multicasts", AddrsPerJob: 8, MinNodes: 2}
	return lease, err
}

// The device-plugin path puts a job lease's collectives in the pod's env
// file beside SLINGSHOT_*, and keeps them in the checkpoint for a restart.
func TestPreStartPublishesCollectives(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.useLeaser(t, collLeaser{r.leaser})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0, dev1))
	if err := r.b.PreStart(t.Context(), res, []string{dev1, dev0}); err != nil {
		t.Fatal(err)
	}
	env := r.envFile(t, dev0, dev1)
	for _, want := range []string{"SLINGSHOT_VNIS=1024", "FI_CXI_COLL_JOB_ID=k8s-uid-j", "FI_CXI_COLL_MCAST_TOKEN=session-1",
		"FI_CXI_COLL_FABRIC_MGR_URL=https://fm/fabric/collectives/multicasts", "FI_CXI_HWCOLL_ADDRS_PER_JOB=8", "FI_CXI_HWCOLL_MIN_NODES=2"} {
		if !strings.Contains(env, want) {
			t.Errorf("env file lacks %q:\n%s", want, env)
		}
	}
	st, err := checkpoint.Load(r.store.Path(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Holders["ns/a"]; p == nil || len(p.CollEnv) != 6 {
		t.Fatalf("checkpoint pod = %+v, want its collectives environment", p)
	}
	// inspect (and kubectl slingshot pod) names the reservation from it.
	if id := engine.CollectivesJobID(r.record(t, "ns/a").CollEnv); id != "k8s-uid-j" {
		t.Errorf("the record's collectives job %q, want k8s-uid-j", id)
	}
}

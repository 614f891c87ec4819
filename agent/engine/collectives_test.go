package engine

import (
	"slices"
	"testing"

	"github.com/slingshot-k8s/slingshot/controllerclient"
)

func TestCollectivesEnv(t *testing.T) {
	c := &controllerclient.Collectives{JobID: "k8s-u", JobStepID: "0", Token: "tok", FabricMgrURL: "https://fm/fabric/collectives/multicasts",
		AddrsPerJob: 8, MinNodes: 2}
	all := []string{"FI_CXI_COLL_JOB_ID=k8s-u", "FI_CXI_COLL_JOB_STEP_ID=0", "FI_CXI_COLL_MCAST_TOKEN=tok",
		"FI_CXI_COLL_FABRIC_MGR_URL=https://fm/fabric/collectives/multicasts", "FI_CXI_HWCOLL_ADDRS_PER_JOB=8", "FI_CXI_HWCOLL_MIN_NODES=2"}
	tests := []struct {
		name  string
		lease controllerclient.Lease
		want  []string
	}{
		{"job lease", controllerclient.Lease{Scope: controllerclient.ScopeJob, Collectives: c}, all},
		{"job lease without", controllerclient.Lease{Scope: controllerclient.ScopeJob}, nil},
		{"pod lease", controllerclient.Lease{Scope: controllerclient.ScopePod, Collectives: c}, nil},
		{"claim lease", controllerclient.Lease{Scope: controllerclient.ScopeClaim, Collectives: c}, nil},
		{"no token", controllerclient.Lease{Scope: controllerclient.ScopeJob, Collectives: &controllerclient.Collectives{JobID: "k8s-u"}}, nil},
	}
	for _, tt := range tests {
		if got := CollectivesEnv(tt.lease); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCollectivesJobID(t *testing.T) {
	env := CollectivesEnv(controllerclient.Lease{Scope: controllerclient.ScopeJob, Collectives: &controllerclient.Collectives{JobID: "k8s-u", Token: "tok"}})
	if got := CollectivesJobID(env); got != "k8s-u" {
		t.Errorf("CollectivesJobID(%q) = %q, want k8s-u", env, got)
	}
	if got := CollectivesJobID([]string{"FI_CXI_COLL_JOB_IDX=no", "SLINGSHOT_VNIS=1024"}); got != "" {
		t.Errorf("CollectivesJobID without the variable = %q, want none", got)
	}
}

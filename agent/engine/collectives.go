package engine

import (
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// Hardware-collectives variables, as Slurm's switch/hpe_slingshot plugin
// sets them for a job step and libfabric's CXI provider reads them.
const (
	EnvCollJobID      = "FI_CXI_COLL_JOB_ID"
	EnvCollJobStepID  = "FI_CXI_COLL_JOB_STEP_ID"
	EnvCollMcastToken = "FI_CXI_COLL_MCAST_TOKEN"
	EnvCollFabricMgr  = "FI_CXI_COLL_FABRIC_MGR_URL"
	EnvHWCollAddrs    = "FI_CXI_HWCOLL_ADDRS_PER_JOB"
	EnvHWCollMinNodes = "FI_CXI_HWCOLL_MIN_NODES"
)

// CollectivesEnv is the hardware-collectives environment of a lease,
// "NAME=value" each: set only for a job-scoped lease that carries a
// reservation, since the reservation is the job's and its pods on every
// node share it. They carry no suffix (Binding.Suffix): libfabric reads
// these names only, and a pod belongs to one job.
func CollectivesEnv(l controllerclient.Lease) []string {
	c := l.Collectives
	if l.Scope != controllerclient.ScopeJob || c == nil || c.JobID == "" || c.Token == "" {
		return nil
	}
	return []string{
		EnvCollJobID + "=" + c.JobID,
		EnvCollJobStepID + "=" + c.JobStepID,
		EnvCollMcastToken + "=" + c.Token,
		EnvCollFabricMgr + "=" + c.FabricMgrURL,
		EnvHWCollAddrs + "=" + strconv.FormatUint(uint64(c.AddrsPerJob), 10),
		EnvHWCollMinNodes + "=" + strconv.FormatUint(uint64(c.MinNodes), 10),
	}
}

// CollectivesJobID is the reservation's job ID in env, a CollectivesEnv
// list; "" when it has none.
func CollectivesJobID(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvCollJobID+"="); ok {
			return v
		}
	}
	return ""
}

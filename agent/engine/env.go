package engine

import (
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/cxi"
)

// Env names, as Slurm's Slingshot plugin sets them.
const (
	EnvDevices = "SLINGSHOT_DEVICES"
	EnvSvcIDs  = "SLINGSHOT_SVC_IDS"
	EnvVNIs    = "SLINGSHOT_VNIS"
	EnvTCs     = "SLINGSHOT_TCS"
)

// Binding is what a container's environment says of its services: its
// NICs in order, the service on each (0 where it has none), its VNI (0
// for none) and traffic classes.
type Binding struct {
	NICs     []string
	Services []uint32
	VNI      uint16
	// Extra are the VNIs the services carry after VNI (named ones, such as
	// a storage VNI), listed after it in SLINGSHOT_VNIS as Slurm orders a
	// step's VNIs; ignored with no VNI.
	Extra []uint16
	TCs   cxi.TrafficClasses
	// Suffix, when set, is appended to every name ("_" + Suffix), so that
	// a pod in two VNI domains sees both.
	Suffix string
}

// Env is b's SLINGSHOT_* environment, "NAME=value" each. A NIC without a
// service is left out of SLINGSHOT_DEVICES too, so that the two lists
// stay in step; with no VNI (the holder opted out, so no services) the
// devices alone are listed.
func Env(b Binding) []string {
	var devs, ids []string
	for i, n := range b.NICs {
		switch {
		case b.VNI == 0:
			devs = append(devs, n)
		case i < len(b.Services) && b.Services[i] != 0:
			devs = append(devs, n)
			ids = append(ids, strconv.FormatUint(uint64(b.Services[i]), 10))
		}
	}
	vnis := ""
	if b.VNI != 0 {
		vnis = strconv.Itoa(int(b.VNI))
		for _, v := range b.Extra {
			vnis += "," + strconv.Itoa(int(v))
		}
	}
	name := func(base string) string {
		if b.Suffix == "" {
			return base
		}
		return base + "_" + b.Suffix
	}
	return []string{
		name(EnvDevices) + "=" + strings.Join(devs, ","),
		name(EnvSvcIDs) + "=" + strings.Join(ids, ","),
		name(EnvVNIs) + "=" + vnis,
		name(EnvTCs) + "=" + b.TCs.String(),
	}
}

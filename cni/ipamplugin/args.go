package ipamplugin

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// maxArgs bounds CNI_ARGS: the runtime's keys are a few hundred bytes.
const maxArgs = 64 << 10

// Args are the values of CNI_ARGS the plugin reads.
type Args struct {
	// PodNamespace, PodName, PodUID name the pod (K8S_POD_NAMESPACE,
	// K8S_POD_NAME, K8S_POD_UID), recorded by the agent for inspection.
	PodNamespace, PodName, PodUID string
	// IP is a fixed address asked for (IP=), as the static and whereabouts
	// plugins accept it: one address, with or without a prefix length.
	IP string
}

// ParseArgs reads CNI_ARGS: "K=V" pairs separated by ";". Keys the plugin
// does not know are ignored whatever IgnoreUnknown says: they belong to
// the runtime or to other plugins. A key given twice with two values is
// an error. Every error is a *types.Error with code 4 (invalid
// environment), quoting the pair at fault.
func ParseArgs(s string) (Args, error) {
	if len(s) > maxArgs {
		return Args{}, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS is %d bytes, more than %d", len(s), maxArgs), "")
	}
	var a Args
	fields := map[string]*string{
		"K8S_POD_NAMESPACE": &a.PodNamespace,
		"K8S_POD_NAME":      &a.PodName,
		"K8S_POD_UID":       &a.PodUID,
		"IP":                &a.IP,
	}
	for pair := range strings.SplitSeq(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return Args{}, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %q is not KEY=VALUE", clip([]byte(pair))), "")
		}
		dst := fields[k]
		if dst == nil {
			continue
		}
		if *dst != "" && *dst != v {
			return Args{}, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %s is given twice, %q and %q", k, clip([]byte(*dst)), clip([]byte(v))), "")
		}
		*dst = v
	}
	return a, nil
}

package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// maxPid bounds a sandbox pid: the kernel's PID_MAX_LIMIT (4 Mi).
const maxPid = 1 << 22

// ErrBadInfo: a sandbox status's verbose "info" is not what a runtime
// writes there.
var ErrBadInfo = errors.New("bad sandbox info")

// SandboxInfo is what a runtime's verbose PodSandboxStatus says about the
// sandbox's network namespace.
type SandboxInfo struct {
	// Pid is the sandbox ("pause") process in the runtime's (the host's)
	// PID namespace; 0 when the runtime names none.
	Pid int
	// NetnsPath is the path of the namespace's bind mount on the host,
	// "/var/run/netns/cni-…" (containerd) or "/var/run/netns/<uuid>"
	// (CRI-O); empty when the runtime names none.
	NetnsPath string
	// HostNetwork reports whether the runtime spec lists the sandbox's
	// namespaces without a network one: it runs in the runtime's own, the
	// host's.
	HostNetwork bool
	// NetnsClosed reports whether containerd says the namespace is gone.
	NetnsClosed bool
}

// sandboxInfoJSON is the part of the "info" JSON that names the network
// namespace. The fields, as the runtimes write them (read in their
// sources; names and tags only):
//
//   - containerd 1.7, pkg/cri/server/sandbox_status.go, and
//     pkg/cri/sbserver/podsandbox/sandbox_status.go, type SandboxInfo;
//     containerd 2.x, internal/cri/server/podsandbox/types/sandbox_info.go,
//     marshalled by internal/cri/server/podsandbox/sandbox_status.go
//     toCRISandboxInfo and again by internal/cri/server/sandbox_status.go
//     setUpdatedResources: "pid" (uint32, the sandbox task's pid),
//     "netNamespaceClosed" (bool), "runtimeSpec" (the OCI spec of the pause
//     container; its linux.namespaces has {"type":"network","path":nsPath}
//     unless the pod uses the host network, when the entry is removed:
//     internal/cri/server/podsandbox/sandbox_run_linux.go), and, from the
//     sbserver on, "sandboxMetadata" = {"Version":"v1","Metadata":{...,
//     "NetNSPath": ...}} (internal/cri/store/sandbox/metadata.go, fields
//     untagged). nsPath is /var/run/netns/cni-<random> (pkg/netns
//     netns_linux.go), or under the state dir with
//     netns_mounts_under_state_dir.
//   - CRI-O, server/sandbox_status.go createSandboxInfo: {"image", "pid"
//     (int), "runtimeSpec"} for an infra container; only {"runtimeSpec"} for
//     a "spoofed" one (drop_infra_ctr, the default, unless the pod shares
//     its PID namespace: internal/lib/sandbox/sandbox_linux.go NeedsInfra).
//     The network entry's path is <namespaces_dir>/netns/<uuid>, default
//     /var/run/netns/<uuid>, a namespace pinned by pinns
//     (internal/config/nsmgr/nsmgr_linux.go); with the host network pinns
//     pins the host's own namespace there (pinns/src/pinns.c, --net=host).
type sandboxInfoJSON struct {
	Pid         *int64 `json:"pid"`
	NetnsClosed bool   `json:"netNamespaceClosed"`
	RuntimeSpec *struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	} `json:"runtimeSpec"`
	SandboxMetadata *struct {
		Metadata struct {
			NetNSPath string
		}
	} `json:"sandboxMetadata"`
}

// ParseSandboxInfo parses the "info" entry of a verbose PodSandboxStatus
// response (containerd's or CRI-O's JSON). It returns an error wrapping
// [ErrBadInfo] when the JSON is malformed, a pid is out of range, a path is
// not absolute and clean, or the spec lists two network namespaces.
func ParseSandboxInfo(info string) (SandboxInfo, error) {
	var raw sandboxInfoJSON
	if err := json.Unmarshal([]byte(info), &raw); err != nil {
		return SandboxInfo{}, fmt.Errorf("%w: %w", ErrBadInfo, err)
	}
	out := SandboxInfo{NetnsClosed: raw.NetnsClosed}
	if raw.Pid != nil {
		if *raw.Pid < 0 || *raw.Pid >= maxPid {
			return SandboxInfo{}, fmt.Errorf("%w: pid %d out of range", ErrBadInfo, *raw.Pid)
		}
		out.Pid = int(*raw.Pid)
	}
	if raw.RuntimeSpec != nil && raw.RuntimeSpec.Linux != nil && raw.RuntimeSpec.Linux.Namespaces != nil {
		network := 0
		for _, ns := range raw.RuntimeSpec.Linux.Namespaces {
			if ns.Type != "network" {
				continue
			}
			network++
			out.NetnsPath = ns.Path
		}
		switch network {
		case 0:
			out.HostNetwork = true
		case 1:
		default:
			return SandboxInfo{}, fmt.Errorf("%w: %d network namespaces in the runtime spec", ErrBadInfo, network)
		}
	}
	if out.NetnsPath == "" && !out.HostNetwork && raw.SandboxMetadata != nil {
		out.NetnsPath = raw.SandboxMetadata.Metadata.NetNSPath
	}
	if p := out.NetnsPath; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0)) {
		return SandboxInfo{}, fmt.Errorf("%w: netns path %q is not absolute and clean", ErrBadInfo, p)
	}
	return out, nil
}

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeContainer is one container as the node's containerd holds it
// (CRI ContainerStatus, verbose): the configuration the kubelet created it
// with, and the OCI spec the runtime made of it, with CDI's and NRI's
// edits applied.
type RuntimeContainer struct {
	// CDI are the CDI devices the kubelet asked the runtime for: every
	// non-empty field of the CRI configuration whose name says CDI (its
	// CDI_devices), and every annotation under cdi.k8s.io/ (the kubelet's
	// older way), as "field: value".
	CDI []string
	// KubeletEnv are the names of the environment variables the kubelet
	// set: the pod spec's and the device plugin's Allocate answer's.
	KubeletEnv []string
	// Env is the container process's environment in the OCI spec ("K=V"),
	// what the runtime starts it with.
	Env []string
}

// RuntimeContainer reads the container id (a pod status's containerID,
// "containerd://..." or bare) from the node's containerd.
func (e *Env) RuntimeContainer(ctx context.Context, id string) (RuntimeContainer, error) {
	id = strings.TrimPrefix(id, "containerd://")
	conn, err := grpc.NewClient("unix://"+e.Node.ContainerdSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return RuntimeContainer{}, err
	}
	defer conn.Close()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return RuntimeContainer{}, fmt.Errorf("container %s: CRI status: %w", id, err)
	}
	return parseRuntimeInfo(id, resp.GetInfo()["info"])
}

// parseRuntimeInfo reads containerd's verbose container info: its CRI
// configuration ("config") and OCI spec ("runtimeSpec"). The
// configuration is read loosely, by field name, so that no field the
// kubelet may name CDI devices in goes unseen.
func parseRuntimeInfo(id, info string) (RuntimeContainer, error) {
	var raw struct {
		Config      map[string]json.RawMessage `json:"config"`
		RuntimeSpec struct {
			Process struct {
				Env []string `json:"env"`
			} `json:"process"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(info), &raw); err != nil {
		return RuntimeContainer{}, fmt.Errorf("container %s: verbose info: %w", id, err)
	}
	if len(raw.Config) == 0 || len(raw.RuntimeSpec.Process.Env) == 0 {
		return RuntimeContainer{}, fmt.Errorf("container %s: verbose info without a CRI configuration or an OCI environment: %.300s", id, info)
	}
	var c RuntimeContainer
	for _, k := range slices.Sorted(maps.Keys(raw.Config)) {
		v := strings.TrimSpace(string(raw.Config[k]))
		if strings.Contains(strings.ToLower(k), "cdi") && v != "" && v != "null" && v != "[]" && v != "{}" {
			c.CDI = append(c.CDI, k+": "+v)
		}
	}
	var envs []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(raw.Config["envs"], &envs); err != nil {
		return RuntimeContainer{}, fmt.Errorf("container %s: CRI envs: %w", id, err)
	}
	for _, kv := range envs {
		c.KubeletEnv = append(c.KubeletEnv, kv.Key)
	}
	var annotations map[string]string
	if a, ok := raw.Config["annotations"]; ok {
		if err := json.Unmarshal(a, &annotations); err != nil {
			return RuntimeContainer{}, fmt.Errorf("container %s: CRI annotations: %w", id, err)
		}
	}
	for k, v := range annotations {
		if strings.HasPrefix(k, "cdi.k8s.io/") {
			c.CDI = append(c.CDI, "annotation "+k+": "+v)
		}
	}
	c.Env = raw.RuntimeSpec.Process.Env
	return c, nil
}

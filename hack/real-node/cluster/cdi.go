package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// CDIEnv reads the environment a CDI spec file gives its containers.
func CDIEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec struct {
		ContainerEdits struct {
			Env []string `json:"env"`
		} `json:"containerEdits"`
		Devices []struct {
			ContainerEdits struct {
				Env []string `json:"env"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	all := spec.ContainerEdits.Env
	for _, d := range spec.Devices {
		all = append(all, d.ContainerEdits.Env...)
	}
	for _, kv := range all {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

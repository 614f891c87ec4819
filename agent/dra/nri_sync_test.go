package dra

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// The runtime lists a pod's dead sandbox beside the one made again; the
// claim must bind to the one that runs.
func TestSynchronizePicksThePodsLiveSandbox(t *testing.T) {
	sb := func(id, uid, path string, pid uint32) *api.PodSandbox {
		return &api.PodSandbox{Id: id, Uid: uid, Name: "p-" + uid, Namespace: "ns", Pid: pid,
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: path}}}}
	}
	for _, tc := range []struct {
		name       string
		pods       []*api.PodSandbox
		containers []*api.Container
		want       string
	}{
		{"the live one listed first",
			[]*api.PodSandbox{sb("new", "a", "/netns/new", 20), sb("old", "a", "/netns/old", 0)},
			[]*api.Container{{PodSandboxId: "new", State: api.ContainerState_CONTAINER_RUNNING}, {PodSandboxId: "old", State: api.ContainerState_CONTAINER_STOPPED}},
			"/netns/new"},
		{"the live one listed last",
			[]*api.PodSandbox{sb("old", "a", "/netns/old", 0), sb("new", "a", "/netns/new", 20)},
			nil, "/netns/new"},
		{"a running container wins over a process",
			[]*api.PodSandbox{sb("new", "a", "/netns/new", 20), sb("other", "a", "/netns/other", 21)},
			[]*api.Container{{PodSandboxId: "new", State: api.ContainerState_CONTAINER_RUNNING}},
			"/netns/new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := liveFirst(tc.pods, tc.containers)
			if len(got) != 1 || got[0].NetnsPath != tc.want {
				t.Fatalf("sandboxes %+v, want one for pod a with %s", got, tc.want)
			}
		})
	}
}

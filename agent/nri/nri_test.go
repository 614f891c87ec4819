package nri

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
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

// TestNRIStateEvents: the node is told when the NRI connection is lost
// (or never made), once for a runtime that stays away, and when it comes
// back after a loss; a first connection is no news.
func TestNRIStateEvents(t *testing.T) {
	ev := &eventtest.Recorder{}
	s := NewState("/run/nri/nri.sock", nil).WithEvents(ev, "node-a")
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "/run/nri/nri.sock") {
		t.Fatalf("Ready before any connection = %v, want an error naming the socket", err)
	}
	s.set(true, nil)
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready once connected = %v", err)
	}
	if len(ev.All()) != 0 {
		t.Fatalf("a first connection told: %+v", ev.All())
	}
	s.set(false, errors.New("runtime restarted"))
	s.set(false, errors.New("connection refused"))
	s.set(false, errors.New("connection refused"))
	down := ev.Of(event.NRIDisconnected)
	if len(down) != 1 || down[0].Obj != event.Node("node-a") || !strings.Contains(down[0].What, "runtime restarted") {
		t.Fatalf("disconnect events %+v, want one on the node with the cause", down)
	}
	s.set(true, nil)
	s.set(true, nil)
	if up := ev.Of(event.NRIConnected); len(up) != 1 {
		t.Fatalf("%d reconnect events, want 1", len(up))
	}
	s.set(false, errors.New("again"))
	if n := len(ev.Of(event.NRIDisconnected)); n != 2 {
		t.Fatalf("%d disconnect events after a second loss, want 2", n)
	}
}

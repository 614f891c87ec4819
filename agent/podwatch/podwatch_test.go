package podwatch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeLister returns whatever response it holds; the real PodResources
// server is exercised by the end-to-end test.
type fakeLister struct {
	mu     sync.Mutex
	resp   *podresourcesv1.ListPodResourcesResponse
	err    error
	calls  int
	called chan struct{} // if set, receives after every call
}

func (f *fakeLister) List(context.Context, *podresourcesv1.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.called != nil {
		defer func() { f.called <- struct{}{} }()
	}
	return f.resp, f.err
}

func (f *fakeLister) set(resp *podresourcesv1.ListPodResourcesResponse, err error) {
	f.mu.Lock()
	f.resp, f.err = resp, err
	f.mu.Unlock()
}

func podRes(ns, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: containers}
}

func ctr(name string, devs ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devs}
}

func dev(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

const cxi = "hpe.com/cxi"

func TestBuildSnapshot(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podRes("ns", "a", ctr("main", dev(cxi, "nic1"), dev(cxi, "nic0")), ctr("side", dev("nvidia.com/gpu", "gpu0"))),
		podRes("ns", "terminated", ctr("main")), // older kubelets list it with devices freed
		podRes("ns", "gpu-only", ctr("main", dev("nvidia.com/gpu", "gpu1"))),
		podRes("other", "b", ctr("c1", dev(cxi, "nic2"))),
	}}
	ck := &Checkpoint{known: true, devices: map[string]Allocation{deviceKey(cxi, "nic0"): {PodUID: "uid-a", Container: "main"}}}
	snap := buildSnapshot(resp, []string{cxi}, ck)
	if len(snap.Pods) != 2 {
		t.Fatalf("pods = %v, want ns/a and other/b", snap.Pods)
	}
	a := snap.Pods["ns/a"]
	if a.UID != "uid-a" || len(a.Containers) != 1 {
		t.Fatalf("ns/a = %+v", a)
	}
	if got := a.Containers["main"][cxi]; len(got) != 2 || got[0] != "nic0" || got[1] != "nic1" {
		t.Fatalf("ns/a devices = %v, want sorted nic0,nic1", got)
	}
	if p, c, ok := snap.Find(cxi, []string{"nic1"}); !ok || p.Key() != "ns/a" || c != "main" {
		t.Fatalf("Find(nic1) = %v %q %v", p, c, ok)
	}
	if _, _, ok := snap.Find(cxi, []string{"nic0", "nic2"}); ok {
		t.Fatal("Find of devices split over two pods succeeded")
	}
	if _, _, ok := snap.Find(cxi, nil); ok {
		t.Fatal("Find(nil) succeeded")
	}
}

func TestParseKubeletCheckpoint(t *testing.T) {
	// The shape the kubelet's device manager writes (checkpoint v2).
	data := []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"main","ResourceName":"hpe.com/cxi","DeviceIDs":{"0":["nic0"],"1":["nic1"]},"AllocResp":"CgA="}],"RegisteredDevices":{"hpe.com/cxi":["nic0","nic1"]}},"Checksum":1234}`)
	ck, err := parseKubeletCheckpoint(data, []string{cxi})
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := ck.Holder(cxi, []string{"nic1", "nic0"}); !ok || a.PodUID != "u1" || a.Container != "main" || len(ck.devices) != 2 {
		t.Fatalf("checkpoint = %+v", ck)
	}
	if _, err := parseKubeletCheckpoint([]byte(`{"Data":{"PodDeviceEntries":[{"ResourceName":"x"}]}}`), []string{cxi}); err == nil {
		t.Fatal("entry without UID accepted")
	}
	other, err := parseKubeletCheckpoint(data, []string{"nvidia.com/gpu"})
	if err != nil || len(other.devices) != 0 || other.names(Holder{UID: "u1"}) {
		t.Fatalf("a checkpoint read for another resource names %+v (%v)", other, err)
	}
}

func TestWatcherAnnouncesChangesOnly(t *testing.T) {
	lister := &fakeLister{resp: &podresourcesv1.ListPodResourcesResponse{}}
	ticks := make(chan time.Time)
	w := New(Config{Lister: lister, Resources: []string{cxi}, Ticks: ticks})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	tick := func() {
		select {
		case ticks <- time.Now():
		case <-time.After(5 * time.Second):
			t.Fatal("watcher not taking ticks")
		}
	}
	tick() // the first list (empty) ran before this tick was taken
	lister.set(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podRes("ns", "a", ctr("main", dev(cxi, "nic0"))),
	}}, nil)
	tick()
	tick() // a second tick makes sure the list above has finished
	expectChange(t, w, true)
	if _, ok := w.Latest().Pods["ns/a"]; !ok {
		t.Fatalf("latest = %v, want ns/a", w.Latest().Pods)
	}
	tick()
	tick()
	expectChange(t, w, false)

	lister.set(nil, errors.New("kubelet down"))
	tick()
	tick()
	expectChange(t, w, false)
	if _, ok := w.Latest().Pods["ns/a"]; !ok {
		t.Fatal("a failing list dropped the last snapshot")
	}
	lister.set(&podresourcesv1.ListPodResourcesResponse{}, nil)
	tick()
	tick()
	expectChange(t, w, true)
	if len(w.Latest().Pods) != 0 {
		t.Fatalf("latest = %v, want empty", w.Latest().Pods)
	}
}

func expectChange(t *testing.T, w *Watcher, want bool) {
	t.Helper()
	select {
	case <-w.Changes():
		if !want {
			t.Fatal("change announced, want none")
		}
	default:
		if want {
			t.Fatal("no change announced")
		}
	}
}

func TestWatcherListsOnKubeletCheckpointChange(t *testing.T) {
	dir := t.TempDir()
	lister := &fakeLister{resp: &podresourcesv1.ListPodResourcesResponse{}, called: make(chan struct{}, 16)}
	w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir, Ticks: make(chan time.Time)})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// Run sets up the watch before its first list, so once that list is
	// seen a checkpoint write must trigger the next. No ticks are ever
	// sent: only the write can cause a list.
	waitSignal(t, lister.called, "a List call")
	lister.set(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podRes("ns", "a", ctr("main", dev(cxi, "nic0"))),
	}}, nil)
	cp := []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ResourceName":"hpe.com/cxi","DeviceIDs":{"0":["nic0"]}}]}}`)
	// The kubelet's file store writes a temporary file and renames it.
	tmp := filepath.Join(dir, ".tmp-checkpoint")
	if err := os.WriteFile(tmp, cp, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, KubeletCheckpointName)); err != nil {
		t.Fatal(err)
	}
	// The checkpoint names an allocation the last List could not know: it
	// is read at once (a change), and one List follows (another).
	waitFor(t, w, "ns/a listed with UID u1", func() bool {
		p := w.Latest().Pods["ns/a"]
		return p != nil && p.UID == "u1"
	})
}

// waitFor waits, change by change, until cond holds.
func waitFor(t *testing.T, w *Watcher, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.Changes():
		case <-timeout:
			t.Fatalf("%s: not reached", what)
		}
	}
}

// waitSignal fails the test when ch gives nothing within 10 s; what
// names the awaited event.
func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not seen within 10 s", what)
	}
}

func FuzzParseKubeletCheckpoint(f *testing.F) {
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ResourceName":"r","DeviceIDs":{"0":["a"]}}]}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ck, err := parseKubeletCheckpoint(b, []string{"r"})
		if err == nil && (ck == nil || !ck.known || ck.devices == nil) {
			t.Fatal("no checkpoint without error")
		}
	})
}

// podResourcesServer answers List with no pods.
type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
}

func (podResourcesServer) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{}, nil
}

// After the kubelet restarts, its PodResources socket comes back a moment
// after the device manager asks for PreStart: a List made while the
// connection is being re-made waits for it (within ListTimeout) instead
// of failing.
func TestRefreshWaitsForTheKubeletSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	client, conn, err := DialKubelet(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	down := New(Config{Lister: client, ListTimeout: 200 * time.Millisecond})
	if _, err := down.Refresh(t.Context()); err == nil {
		t.Fatal("Refresh with no kubelet socket succeeded")
	}
	// The failed attempt left the connection backing off; the kubelet is
	// now back.
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, podResourcesServer{})
	go srv.Serve(lis)
	defer srv.Stop()
	up := New(Config{Lister: client, ListTimeout: 10 * time.Second})
	start := time.Now()
	if _, err := up.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh once the kubelet socket is back: %v", err)
	}
	t.Logf("listed %v after the socket came back", time.Since(start).Round(time.Millisecond))
}

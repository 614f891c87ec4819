package devplugin

import (
	"context"
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/agent/podwatch"
)

// kubeletPod is one pod's allocation: one container, one resource.
type kubeletPod struct {
	ns, name, uid, container string
	ids                      []string
}

// fakeKubelet behaves as the kubelet's device manager and PodResources
// server do towards the agent (k8s.io/kubernetes v1.37.1,
// pkg/kubelet/cm/devicemanager/manager.go):
//   - Allocate frees the devices of pods no longer active, allocates, and
//     writes the device checkpoint;
//   - List lists the active pods, after freeing in memory (not in the file)
//     the devices of pods no longer active, unless its sources are not
//     ready (after a restart);
//   - every device list a plugin sends rewrites the checkpoint from memory;
//   - after a restart, the allocations come back from the checkpoint, the
//     active pods only as its sources (the API server) refill them.
//
// hack/kubelet-e2e runs the real device manager; this fake adds what that
// harness cannot show: a restart whose List is empty for a while.
type fakeKubelet struct {
	t   testing.TB
	dir string // device-plugins

	mu       sync.Mutex
	active   map[string]kubeletPod // by UID
	alloc    map[string]kubeletPod // by UID: the allocations in memory
	notReady bool                  // sources not ready: List is empty and frees nothing
	listErr  error
}

func newFakeKubelet(t testing.TB) *fakeKubelet {
	k := &fakeKubelet{t: t, dir: filepath.Join(t.TempDir(), "device-plugins"), active: map[string]kubeletPod{}, alloc: map[string]kubeletPod{}}
	if err := os.MkdirAll(k.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return k
}

// admit makes the pod active and allocates its devices.
func (k *fakeKubelet) admit(p kubeletPod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.active[p.uid] = p
	k.freeInactiveLocked()
	k.alloc[p.uid] = p
	k.writeLocked()
}

// remove ends the pod: it is no longer active; its devices are freed in
// memory at the next List or Allocate.
func (k *fakeKubelet) remove(uid string) {
	k.mu.Lock()
	delete(k.active, uid)
	k.mu.Unlock()
}

// restart is a kubelet restart: no pod is active until sourcesReady; the
// allocations are read back from the checkpoint.
func (k *fakeKubelet) restart() {
	k.mu.Lock()
	k.active = map[string]kubeletPod{}
	k.notReady = true
	k.mu.Unlock()
}

// sourcesReady refills the active pods from the API server.
func (k *fakeKubelet) sourcesReady() {
	k.mu.Lock()
	defer k.mu.Unlock()
	maps.Copy(k.active, k.alloc)
	k.notReady = false
}

// nudge is a device plugin's device list arriving: the kubelet writes its
// checkpoint from memory.
func (k *fakeKubelet) nudge(string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writeLocked()
}

func (k *fakeKubelet) setListErr(err error) {
	k.mu.Lock()
	k.listErr = err
	k.mu.Unlock()
}

func (k *fakeKubelet) freeInactiveLocked() {
	if k.notReady {
		return
	}
	for uid := range k.alloc {
		if _, ok := k.active[uid]; !ok {
			delete(k.alloc, uid)
		}
	}
}

// List answers as the PodResources v1 server.
func (k *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listErr != nil {
		return nil, k.listErr
	}
	k.freeInactiveLocked()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, uid := range slices.Sorted(maps.Keys(k.active)) {
		p := k.active[uid]
		c := &podresourcesv1.ContainerResources{Name: p.container}
		if a, ok := k.alloc[uid]; ok {
			c.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: res, DeviceIds: a.ids}}
		}
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{Namespace: p.ns, Name: p.name,
			Containers: []*podresourcesv1.ContainerResources{c}})
	}
	return resp, nil
}

// writeLocked writes the checkpoint as the kubelet's checkpoint manager
// does: a temporary file renamed over the old one.
func (k *fakeKubelet) writeLocked() {
	type entry struct {
		PodUID        string
		ContainerName string
		ResourceName  string
		DeviceIDs     map[string][]string
		AllocResp     []byte
	}
	var cp struct {
		Data struct {
			PodDeviceEntries  []entry
			RegisteredDevices map[string][]string
		}
		Checksum uint64
	}
	for _, uid := range slices.Sorted(maps.Keys(k.alloc)) {
		p := k.alloc[uid]
		cp.Data.PodDeviceEntries = append(cp.Data.PodDeviceEntries, entry{PodUID: uid, ContainerName: p.container,
			ResourceName: res, DeviceIDs: map[string][]string{"0": p.ids}, AllocResp: []byte{10, 0}})
	}
	b, err := json.Marshal(cp)
	if err != nil {
		k.t.Error(err)
		return
	}
	tmp := filepath.Join(k.dir, ".tmp-checkpoint")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		k.t.Error(err)
		return
	}
	if err := os.Rename(tmp, k.checkpointPath()); err != nil {
		k.t.Error(err)
	}
}

func (k *fakeKubelet) checkpointPath() string {
	return filepath.Join(k.dir, podwatch.KubeletCheckpointName)
}

// limiter is the kubelet's PodResources rate limit; *rate.Limiter is one.
type limiter interface{ Allow() bool }

// serve serves k's PodResources on a unix socket behind lim, as the
// kubelet's interceptor does, and returns a client of it.
func (k *fakeKubelet) serve(t testing.TB, lim limiter) podresourcesv1.PodResourcesListerClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if lim != nil && !lim.Allow() {
			return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
		}
		return handler(ctx, req)
	}))
	podresourcesv1.RegisterPodResourcesListerServer(srv, listerServer{k: k})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	client, conn, err := podwatch.DialKubelet(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		wg.Wait()
	})
	return client
}

type listerServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	k *fakeKubelet
}

func (s listerServer) List(ctx context.Context, req *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return s.k.List(ctx, req)
}

// useWatcher makes r's binder find pods with a podwatch.Watcher of k.
func (r *rig) useWatcher(k *fakeKubelet, lister podwatch.Lister) *podwatch.Watcher {
	if lister == nil {
		lister = k
	}
	w := podwatch.New(podwatch.Config{Lister: lister, Resources: []string{res}, PluginDir: k.dir,
		MinListInterval: 1, Nudge: k.nudge, Logger: r.b.logger.With("component", "podwatch")})
	r.b.pods = w
	return w
}

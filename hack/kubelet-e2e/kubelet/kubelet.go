// Package kubelet runs the parts of the real kubelet that a device plugin
// talks to: the device manager of k8s.io/kubernetes (registration,
// ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer, its
// checkpoint) and the PodResources v1 server backed by that manager. Pods
// are admitted and removed by the test, standing in for the pod workers.
//
// Nothing here re-implements kubelet logic: admission calls the manager's
// own Allocate and GetDeviceRunContainerOptions, capacity comes from its
// GetCapacity, and pod removal from its UpdateAllocatedDevices.
package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	apisgrpc "k8s.io/kubernetes/pkg/kubelet/apis/grpc"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newManagerImpl is the device manager's only constructor that takes a
// socket path; the exported one hard-codes /var/lib/kubelet. A pull
// linkname is not type-checked: compare this signature with
// pkg/kubelet/cm/devicemanager/manager.go whenever the k8s version moves.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)

// Kubelet is a running device manager plus PodResources server under one
// kubelet directory. Its methods are safe for concurrent use.
type Kubelet struct {
	Dir string // the kubelet directory (device-plugins/, pod-resources/)

	logger  klog.Logger
	manager *devicemanager.ManagerImpl
	podRes  *grpc.Server
	podWG   sync.WaitGroup

	// ready is false while the kubelet's sources (the API server) are not
	// ready after a restart: no pod is active, and the device manager
	// frees nothing.
	ready atomic.Bool
	lists atomic.Int64 // PodResources List calls answered

	// admitting serializes Allocate: the kubelet admits pods one at a
	// time (HandlePodAdditions, in its sync loop), and the manager's
	// Allocate relies on it (its devicesToReuse map has no lock).
	// Containers start side by side, in the pods' workers.
	admitting sync.Mutex
	// activating keeps pods from becoming active while the PodResources
	// server's UpdateAllocatedDevices runs (those calls hold it for
	// reading). The manager's UpdateAllocatedDevices lists the active
	// pods before it takes its own lock (k8s.io/kubernetes v1.37.1,
	// pkg/kubelet/cm/devicemanager/manager.go), so a call that listed
	// them before a pod became active, and took the lock after the pod's
	// Allocate, frees the pod's devices; its container then cannot start
	// ("no devices found allocated in local cache"). The real kubelet has
	// that race (once in about 15,000 admissions beside the agent's 100 ms
	// List here); the harness keeps it out, so that a test sees the agent.
	activating sync.RWMutex

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
}

// Start runs the device manager on <dir>/device-plugins/kubelet.sock and
// the PodResources v1 API on <dir>/pod-resources/kubelet.sock, behind the
// kubelet's own rate limit (100 requests a second, burst 10). numaNodes
// is the machine's NUMA node count as cadvisor would report it. pods are
// already running, as after a kubelet restart: their allocations come back
// from the manager's checkpoint.
func Start(ctx context.Context, dir string, numaNodes int, pods ...*v1.Pod) (*Kubelet, error) {
	k, err := StartNotReady(ctx, dir, numaNodes)
	if err != nil {
		return nil, err
	}
	k.SourcesReady(pods...)
	return k, nil
}

// StartNotReady is Start as a real kubelet restart is for about a second:
// its sources (the API server) are not ready yet, so no pod is active and
// PodResources lists none, while the device manager holds every allocation
// of its checkpoint and frees none. SourcesReady ends it.
func StartNotReady(ctx context.Context, dir string, numaNodes int) (*Kubelet, error) {
	k := &Kubelet{Dir: dir, logger: klog.FromContext(ctx), pods: map[types.UID]*v1.Pod{}}
	pluginDir := filepath.Join(dir, "device-plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return nil, err
	}
	var topo []cadvisorapi.Node
	for i := range numaNodes {
		topo = append(topo, cadvisorapi.Node{Id: i})
	}
	m, err := newManagerImpl(k.logger, filepath.Join(pluginDir, "kubelet.sock"), topo, topologymanager.NewFakeManager(k.logger))
	if err != nil {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	k.manager = m
	if err := m.Start(k.logger, k.activePods, readySources{k}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("start device manager: %w", err)
	}
	if err := k.servePodResources(ctx); err != nil {
		_ = m.Stop(k.logger)
		return nil, err
	}
	return k, nil
}

// SourcesReady makes pods active, as the kubelet does once the API server
// has told it its pods, and the kubelet's sources ready.
func (k *Kubelet) SourcesReady(pods ...*v1.Pod) {
	k.activating.Lock()
	defer k.activating.Unlock()
	k.mu.Lock()
	for _, p := range pods {
		k.pods[p.UID] = p
	}
	k.mu.Unlock()
	k.ready.Store(true)
}

// Lists returns how many PodResources List calls the kubelet has answered
// (not those its rate limit refused).
func (k *Kubelet) Lists() int64 { return k.lists.Load() }

// Stop ends both servers, as a kubelet exit would. The checkpoint stays, so
// a later Start on the same directory restores the allocations.
func (k *Kubelet) Stop() error {
	k.podRes.Stop()
	k.podWG.Wait()
	return k.manager.Stop(k.logger)
}

func (k *Kubelet) servePodResources(ctx context.Context) error {
	dir := filepath.Join(k.Dir, "pod-resources")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sock := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen %s: %w", sock, err)
	}
	count := grpc.UnaryServerInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/List") {
			k.lists.Add(1)
		}
		return handler(ctx, req)
	})
	k.podRes = grpc.NewServer(grpc.ChainUnaryInterceptor(count),
		apisgrpc.WithRateLimiter(ctx, "podresources", podresources.DefaultQPS, podresources.DefaultBurstTokens))
	podresourcesv1.RegisterPodResourcesListerServer(k.podRes, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods:             podsProvider{k},
		Devices:          devicesProvider{k},
		Cpus:             noCPUs{},
		Memory:           noMemory{},
		DynamicResources: noDRA{},
	}))
	k.podWG.Go(func() { _ = k.podRes.Serve(lis) })
	return nil
}

// Capacity returns the capacity and allocatable count of one resource as
// the kubelet would report them in the Node status.
func (k *Kubelet) Capacity(resource string) (capacity, allocatable int64) {
	c, a, _ := k.manager.GetCapacity(k.logger)
	if q, ok := c[v1.ResourceName(resource)]; ok {
		capacity = q.Value()
	}
	if q, ok := a[v1.ResourceName(resource)]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

// Admit does what the kubelet does for a new pod's devices: Allocate for
// every container (which calls GetPreferredAllocation and Allocate on the
// plugin), then, as each container starts, GetDeviceRunContainerOptions
// (which calls PreStartContainer). The pod stays active until RemovePod.
func (k *Kubelet) Admit(ctx context.Context, pod *v1.Pod) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
	if err := k.allocate(ctx, pod); err != nil {
		return nil, err
	}
	return k.StartContainers(ctx, pod)
}

func (k *Kubelet) allocate(ctx context.Context, pod *v1.Pod) error {
	k.admitting.Lock()
	defer k.admitting.Unlock()
	k.activating.Lock()
	k.mu.Lock()
	k.pods[pod.UID] = pod
	k.mu.Unlock()
	k.activating.Unlock()
	for i := range pod.Spec.Containers {
		if err := k.manager.Allocate(ctx, pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
			k.RemovePod(pod.UID)
			return fmt.Errorf("allocate %s/%s: %w", pod.Name, pod.Spec.Containers[i].Name, err)
		}
	}
	return nil
}

// StartContainers returns each container's run options as the kubelet
// computes them at container start; call it again to model a restart.
func (k *Kubelet) StartContainers(ctx context.Context, pod *v1.Pod) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
	opts := map[string]*devicemanager.DeviceRunContainerOptions{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		o, err := k.manager.GetDeviceRunContainerOptions(ctx, pod, c)
		if err != nil {
			return nil, fmt.Errorf("start container %s/%s: %w", pod.Name, c.Name, err)
		}
		opts[c.Name] = o
	}
	return opts, nil
}

// Devices returns the device IDs of one resource that the manager holds
// for a container.
func (k *Kubelet) Devices(pod *v1.Pod, container, resource string) []string {
	ids := slices.Collect(func(yield func(string) bool) {
		for id := range k.manager.GetDevices(string(pod.UID), container)[resource] {
			if !yield(id) {
				return
			}
		}
	})
	slices.Sort(ids)
	return ids
}

// RemovePod makes the pod inactive and lets the manager free its devices.
func (k *Kubelet) RemovePod(uid types.UID) {
	k.mu.Lock()
	delete(k.pods, uid)
	k.mu.Unlock()
	k.manager.UpdateAllocatedDevices(k.logger)
}

func (k *Kubelet) activePods() []*v1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	pods := make([]*v1.Pod, 0, len(k.pods))
	for _, p := range k.pods {
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(a, b *v1.Pod) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return pods
}

type readySources struct{ k *Kubelet }

func (readySources) AddSource(string) {}
func (r readySources) AllReady() bool { return r.k.ready.Load() }

type podsProvider struct{ k *Kubelet }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.k.activePods() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.k.activePods() }
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.k.activePods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

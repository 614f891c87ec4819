package podwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// KubeletCheckpointName is the device manager's checkpoint file in the
// device-plugins directory.
const KubeletCheckpointName = "kubelet_internal_checkpoint"

// Pod is one pod that holds devices of the watched resources.
type Pod struct {
	Namespace string
	Name      string
	// UID is the pod's UID when the kubelet checkpoint could tell it.
	UID string
	// Containers maps container name to resource name to device IDs.
	Containers map[string]map[string][]string
}

// Key returns "namespace/name", the pod's key in a [Snapshot].
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Snapshot is the set of pods holding watched devices at one moment.
type Snapshot struct {
	Pods map[string]*Pod // by Key
}

// Find returns the pod and container that hold every one of ids for
// resource, if one does.
func (s *Snapshot) Find(resource string, ids []string) (*Pod, string, bool) {
	if len(ids) == 0 {
		return nil, "", false
	}
	for _, key := range slices.Sorted(maps.Keys(s.Pods)) {
		p := s.Pods[key]
		for _, cname := range slices.Sorted(maps.Keys(p.Containers)) {
			held := p.Containers[cname][resource]
			if containsAll(held, ids) {
				return p, cname, true
			}
		}
	}
	return nil, "", false
}

func containsAll(held, ids []string) bool {
	for _, id := range ids {
		if !slices.Contains(held, id) {
			return false
		}
	}
	return true
}

// Lister lists pod resources; the kubelet's PodResources client is one.
type Lister interface {
	List(ctx context.Context, in *podresourcesv1.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error)
}

// DialKubelet connects to the PodResources API on a unix socket. The
// connection is lazy: a kubelet that is not up yet is an error of List,
// not of DialKubelet. Reconnects back off to at most a second: a local
// socket costs nothing to retry, and after a kubelet restart its first
// PreStart must not find the connection still waiting out a long backoff.
func DialKubelet(socket string) (podresourcesv1.PodResourcesListerClient, io.Closer, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources %s: %w", socket, err)
	}
	return podresourcesv1.NewPodResourcesListerClient(conn), conn, nil
}

// Config configures a [Watcher].
type Config struct {
	// Lister is the kubelet's PodResources client.
	Lister Lister
	// Resources are the resource names whose devices are watched.
	Resources []string
	// PluginDir is the kubelet's device-plugins directory, where the
	// device manager's checkpoint lives. Empty: no fsnotify trigger and
	// no UIDs.
	PluginDir string
	// PollInterval is how often PodResources is listed. Default 2 s.
	PollInterval time.Duration
	// ListTimeout bounds one List call, including the wait for a broken
	// connection to the kubelet to be re-made. Default 2 s.
	ListTimeout time.Duration
	// Logger, nil to discard.
	Logger *slog.Logger
	// Ticks replaces the poll timer in tests.
	Ticks <-chan time.Time
}

// Watcher keeps the latest [Snapshot] and announces changes.
// Its methods are safe for concurrent use.
type Watcher struct {
	cfg     Config
	changes chan struct{}

	mu     sync.Mutex
	latest *Snapshot
	listMu sync.Mutex // one List at a time
}

// New returns a Watcher; [Watcher.Run] drives it.
func New(cfg Config) *Watcher {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, changes: make(chan struct{}, 1), latest: &Snapshot{Pods: map[string]*Pod{}}}
}

// Changes receives a value whenever the snapshot changed; changes that
// come faster than they are read coalesce into one.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

// Latest returns the last snapshot listed. It must not be modified.
func (w *Watcher) Latest() *Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// Refresh lists now and returns the new snapshot, announcing a change if
// there was one.
func (w *Watcher) Refresh(ctx context.Context) (*Snapshot, error) {
	w.listMu.Lock()
	defer w.listMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ListTimeout)
	defer cancel()
	// Wait, within ListTimeout, for a connection the kubelet's restart
	// broke, rather than fail at once while it is being re-made.
	resp, err := w.cfg.Lister.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	var uids map[string]string
	if w.cfg.PluginDir != "" {
		uids, err = readKubeletCheckpoint(filepath.Join(w.cfg.PluginDir, KubeletCheckpointName))
		if err != nil {
			w.cfg.Logger.Debug("kubelet checkpoint unreadable; pod UIDs unknown", "err", err)
		}
	}
	snap := buildSnapshot(resp, w.cfg.Resources, uids)
	w.mu.Lock()
	changed := !snapshotsEqual(w.latest, snap)
	w.latest = snap
	w.mu.Unlock()
	if changed {
		select {
		case w.changes <- struct{}{}:
		default:
		}
	}
	return snap, nil
}

// Run lists at every poll tick and on every change of the kubelet's
// checkpoint, until ctx ends. List errors are logged, not fatal: the
// kubelet restarts.
func (w *Watcher) Run(ctx context.Context) error {
	var events <-chan fsnotify.Event
	if w.cfg.PluginDir != "" {
		fw, err := fsnotify.NewWatcher()
		if err == nil {
			err = fw.Add(w.cfg.PluginDir)
		}
		if err != nil {
			w.cfg.Logger.Warn("cannot watch the kubelet checkpoint; polling only", "dir", w.cfg.PluginDir, "err", err)
		} else {
			defer fw.Close()
			events = fw.Events
		}
	}
	ticks := w.cfg.Ticks
	if ticks == nil {
		t := time.NewTicker(w.cfg.PollInterval)
		defer t.Stop()
		ticks = t.C
	}
	failing := false
	list := func() {
		if _, err := w.Refresh(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				w.cfg.Logger.Warn("pod resources unavailable; retrying at the poll interval", "err", err)
			}
			failing = true
			return
		}
		if failing {
			w.cfg.Logger.Info("pod resources available again")
		}
		failing = false
	}
	list()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
			list()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == KubeletCheckpointName {
				list()
			}
		}
	}
}

func buildSnapshot(resp *podresourcesv1.ListPodResourcesResponse, resources []string, uids map[string]string) *Snapshot {
	snap := &Snapshot{Pods: map[string]*Pod{}}
	for _, pr := range resp.GetPodResources() {
		pod := &Pod{Namespace: pr.GetNamespace(), Name: pr.GetName(), Containers: map[string]map[string][]string{}}
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if !slices.Contains(resources, d.GetResourceName()) || len(d.GetDeviceIds()) == 0 {
					continue
				}
				byRes := pod.Containers[c.GetName()]
				if byRes == nil {
					byRes = map[string][]string{}
					pod.Containers[c.GetName()] = byRes
				}
				byRes[d.GetResourceName()] = append(byRes[d.GetResourceName()], d.GetDeviceIds()...)
				for _, id := range d.GetDeviceIds() {
					if uid := uids[d.GetResourceName()+"\x00"+id]; uid != "" {
						pod.UID = uid
					}
				}
			}
		}
		if len(pod.Containers) == 0 {
			continue // holds none of our devices, or terminated (older kubelets)
		}
		for _, byRes := range pod.Containers {
			for r := range byRes {
				slices.Sort(byRes[r])
				byRes[r] = slices.Compact(byRes[r])
			}
		}
		snap.Pods[pod.Key()] = pod
	}
	return snap
}

func snapshotsEqual(a, b *Snapshot) bool {
	return maps.EqualFunc(a.Pods, b.Pods, func(x, y *Pod) bool {
		return x.UID == y.UID && maps.EqualFunc(x.Containers, y.Containers, func(p, q map[string][]string) bool {
			return maps.EqualFunc(p, q, slices.Equal)
		})
	})
}

// kubeletCheckpoint is the part of the device manager's checkpoint that
// the agent reads: which pod holds which device.
type kubeletCheckpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID       string
			ResourceName string
			DeviceIDs    map[string][]string // by NUMA node
		}
	}
}

// readKubeletCheckpoint maps resource+"\x00"+device ID to pod UID.
func readKubeletCheckpoint(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKubeletCheckpoint(b)
}

func parseKubeletCheckpoint(b []byte) (map[string]string, error) {
	var cp kubeletCheckpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("kubelet checkpoint: %w", err)
	}
	uids := map[string]string{}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == "" {
			return nil, errors.New("kubelet checkpoint: entry without pod UID")
		}
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				uids[e.ResourceName+"\x00"+id] = e.PodUID
			}
		}
	}
	return uids, nil
}

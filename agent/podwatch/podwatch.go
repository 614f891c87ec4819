package podwatch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

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

// Snapshot is the set of pods holding watched devices as one successful
// PodResources List saw them.
type Snapshot struct {
	Pods map[string]*Pod // by Key
	// seq is the watcher's clock when the List began; 0 for none.
	seq uint64
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

// names reports whether the snapshot lists h. A different UID under the
// same name is another pod.
func (s *Snapshot) names(h Holder) bool {
	p := s.Pods[h.Namespace+"/"+h.Name]
	return p != nil && (h.UID == "" || p.UID == "" || p.UID == h.UID)
}

// held is the set of devices, by deviceKey, that the snapshot's pods hold.
func (s *Snapshot) held() map[string]bool {
	held := map[string]bool{}
	for _, p := range s.Pods {
		for _, byRes := range p.Containers {
			for resource, ids := range byRes {
				for _, id := range ids {
					held[deviceKey(resource, id)] = true
				}
			}
		}
	}
	return held
}

func containsAll(held, ids []string) bool {
	for _, id := range ids {
		if !slices.Contains(held, id) {
			return false
		}
	}
	return true
}

// Holder is a pod as the agent recorded it, for [Watcher.Gone].
type Holder struct {
	Namespace string
	Name      string
	UID       string              // "" where it was never known
	Devices   map[string][]string // resource → device IDs it held
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

// Defaults of Config.
const (
	DefaultPollInterval    = time.Second
	DefaultListTimeout     = 2 * time.Second
	DefaultMinListInterval = 50 * time.Millisecond
)

// DefaultRetry retries a List the kubelet refused for its rate limit
// (ResourceExhausted): the bucket refills a token every 10 ms.
var DefaultRetry = backoff.Policy{Initial: 20 * time.Millisecond, Max: time.Second, Factor: 2, Jitter: 0.5, Attempts: 40}

// DefaultNudgeBackoff spaces the nudges of one resource while its
// checkpoint keeps lagging the List.
var DefaultNudgeBackoff = backoff.Policy{Initial: 250 * time.Millisecond, Max: 30 * time.Second, Factor: 2}

// Config configures a [Watcher].
type Config struct {
	// Lister is the kubelet's PodResources client.
	Lister Lister
	// Resources are the resource names whose devices are watched.
	Resources []string
	// PluginDir is the kubelet's device-plugins directory, where the
	// device manager's checkpoint lives. Empty: no checkpoint, so no pod
	// is ever taken for gone, and no UIDs.
	PluginDir string
	// PollInterval is how often PodResources is listed. Default 1 s.
	PollInterval time.Duration
	// ListTimeout bounds one List call, including the wait for a broken
	// connection to the kubelet to be re-made. Default 2 s.
	ListTimeout time.Duration
	// MinListInterval spaces the Lists this watcher sends; the kubelet
	// allows 100 a second (burst 10) to every client of the node
	// together. Default 50 ms: at most 20 a second.
	MinListInterval time.Duration
	// Retry retries a List refused with ResourceExhausted, within the
	// caller's context; the zero Policy means DefaultRetry.
	Retry backoff.Policy
	// Nudge, if set, makes the kubelet rewrite its device checkpoint for
	// a resource: the device plugin sends its unchanged device list again.
	// It must not block.
	Nudge func(resource string)
	// OnList, if set, is told of every List call sent to the kubelet, a
	// retry after ResourceExhausted included: its result and how long it
	// took. It is called from the goroutine that listed and must not block.
	OnList func(result ListResult, took time.Duration)
	// NudgeBackoff spaces the nudges of one resource while its checkpoint
	// lags; the zero Policy means DefaultNudgeBackoff.
	NudgeBackoff backoff.Policy
	// Logger, nil to discard.
	Logger *slog.Logger
	// Ticks replaces the poll timer in tests.
	Ticks <-chan time.Time
	// Events replaces the watch of PluginDir in tests.
	Events <-chan fsnotify.Event
	// Now replaces the clock in tests: of the nudge pacing and of the
	// durations told to OnList.
	Now func() time.Time
}

// ListResult is the outcome of one List call, as [Config.OnList] is told.
type ListResult string

// The results of a List call.
const (
	ListOK          ListResult = "ok"
	ListRateLimited ListResult = "rate_limited" // ResourceExhausted: the kubelet's rate limit; retried
	ListError       ListResult = "error"        // any other error, the caller's context ending included
)

// Watcher keeps the latest [Snapshot] and the kubelet's device checkpoint,
// and tells when a pod is gone. Its methods are safe for concurrent use.
//
// Each part that callers share has its own lock, named for what it
// guards, and none takes another's lock while it holds its own:
// snapshots (the latest List), checkpoints (the newest checkpoint read),
// flights (the running List), pacer (the time of the last List) and
// nudges (the pacing of each resource's nudges). The Watcher's methods
// call them one after the other.
type Watcher struct {
	cfg     Config
	changes chan struct{}

	// clock orders checkpoint reads and List starts: a List whose seq is
	// above a read's tick began after that read. The checkpoint reader
	// ticks it after each read, under its lock so that the ticks follow
	// the reads; a List takes its seq after its own read and before it is
	// sent (see fly).
	clock atomic.Uint64

	snapshots   snapshots
	checkpoints *checkpointReader
	flights     flights
	pacer       pacer
	nudges      *nudger

	onWait func() // tests: a caller waits for a running List
}

// snapshots holds the latest snapshot listed.
type snapshots struct {
	mu     sync.Mutex // guards latest and listed
	latest *Snapshot
	listed bool // a List has succeeded
}

// get returns the latest snapshot and whether any List has succeeded.
func (s *snapshots) get() (*Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest, s.listed
}

// keep keeps snap unless a List that began later is kept already, and
// reports whether snap differs from the snapshot it found.
func (s *snapshots) keep(snap *Snapshot) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = !snapshotsEqual(s.latest, snap)
	if snap.seq > s.latest.seq {
		s.latest = snap
	}
	s.listed = true
	return changed
}

// New returns a Watcher; [Watcher.Run] drives it.
func New(cfg Config) *Watcher {
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.ListTimeout = cmp.Or(cfg.ListTimeout, DefaultListTimeout)
	cfg.MinListInterval = cmp.Or(cfg.MinListInterval, DefaultMinListInterval)
	if cfg.Retry.IsZero() {
		cfg.Retry = DefaultRetry
	}
	if cfg.NudgeBackoff.IsZero() {
		cfg.NudgeBackoff = DefaultNudgeBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnList == nil {
		cfg.OnList = func(ListResult, time.Duration) {}
	}
	w := &Watcher{cfg: cfg, changes: make(chan struct{}, 1)}
	w.snapshots.latest = &Snapshot{Pods: map[string]*Pod{}}
	path := ""
	if cfg.PluginDir != "" {
		path = filepath.Join(cfg.PluginDir, KubeletCheckpointName)
	}
	w.checkpoints = newCheckpointReader(path, cfg.Resources, cfg.Logger, &w.clock)
	w.pacer.interval = cfg.MinListInterval
	w.nudges = &nudger{fn: cfg.Nudge, policy: cfg.NudgeBackoff, now: cfg.Now, state: map[string]*nudgeState{}}
	return w
}

// Changes receives a value whenever the snapshot or what the checkpoint
// names changed; changes that come faster than they are read coalesce
// into one.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

func (w *Watcher) announce() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

// Latest returns the last snapshot listed. It must not be modified.
func (w *Watcher) Latest() *Snapshot {
	snap, _ := w.snapshots.get()
	return snap
}

// Checkpoint returns the kubelet's device checkpoint as last read.
func (w *Watcher) Checkpoint() *Checkpoint { return w.checkpoints.latest() }

// Refresh returns the snapshot of a List that began after Refresh was
// called: the one it starts, or, while another List runs, the next one,
// shared by every caller that waits for it.
func (w *Watcher) Refresh(ctx context.Context) (*Snapshot, error) {
	return w.list(ctx, w.clock.Load()+1)
}

// Gone reports whether the kubelet no longer holds h's devices: the last
// successful List does not name it, and neither does its device
// checkpoint. Before any List has succeeded, or while the checkpoint
// cannot be read, nothing is gone: an empty, short or failed read proves
// nothing.
func (w *Watcher) Gone(h Holder) bool {
	snap, listed := w.snapshots.get()
	ck := w.checkpoints.latest()
	return listed && ck.known && !snap.names(h) && !ck.names(h)
}

// Find returns the pod and container holding ids of resource, for
// PreStartContainer. The kubelet writes its checkpoint at Allocate, before
// PreStart, so the checkpoint tells the pod UID and container; when the
// last List began after that and names a pod of that UID holding ids,
// that pod is the answer without a List. Otherwise Find waits for a List
// that began after the checkpoint named them (or after Find was called,
// where it does not): a device freed by a pod that just exited goes to
// the next pod at once, so an older List can name the previous holder.
func (w *Watcher) Find(ctx context.Context, resource string, ids []string) (*Pod, string, error) {
	ck := w.readCheckpoint()
	min := w.clock.Load() + 1
	if a, ok := ck.Holder(resource, ids); ok {
		if snap := w.Latest(); snap.seq > a.seen {
			if p, c, ok := snap.Find(resource, ids); ok && p.UID == a.PodUID && c == a.Container {
				return p, c, nil
			}
		}
		min = a.seen + 1
	}
	snap, err := w.list(ctx, min)
	if err != nil {
		return nil, "", fmt.Errorf("find the pod of devices %v: %w", ids, err)
	}
	if p, c, ok := snap.Find(resource, ids); ok {
		return p, c, nil
	}
	return nil, "", fmt.Errorf("no pod holds devices %v according to the kubelet's PodResources", ids)
}

// Run lists at every poll tick, re-reads the kubelet's checkpoint whenever
// it changes, and lists then only when the checkpoint names an allocation
// made after the last List began, until ctx ends. List errors are logged,
// not fatal: the kubelet restarts.
func (w *Watcher) Run(ctx context.Context) error {
	events, errs, stop := w.watchDir()
	defer stop()
	ticks := w.cfg.Ticks
	if ticks == nil {
		t := time.NewTicker(w.cfg.PollInterval)
		defer t.Stop()
		ticks = t.C
	}
	var p poller
	p.poll(ctx, w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
			p.poll(ctx, w)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == KubeletCheckpointName {
				w.checkpointChanged(ctx)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// A lost event may have been the checkpoint's.
			w.cfg.Logger.Warn("watching the kubelet checkpoint", "err", err)
			w.checkpointChanged(ctx)
		}
	}
}

// watchDir watches the device-plugins directory for writes of the
// checkpoint; without it the poll alone re-reads the checkpoint.
func (w *Watcher) watchDir() (<-chan fsnotify.Event, <-chan error, func()) {
	if w.cfg.Events != nil {
		return w.cfg.Events, nil, func() {}
	}
	if w.cfg.PluginDir == "" {
		return nil, nil, func() {}
	}
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fw.Add(w.cfg.PluginDir); err != nil {
			_ = fw.Close()
		}
	}
	if err != nil {
		w.cfg.Logger.Warn("cannot watch the kubelet checkpoint; polling only", "dir", w.cfg.PluginDir, "err", err)
		return nil, nil, func() {}
	}
	return fw.Events, fw.Errors, func() { _ = fw.Close() }
}

// poller logs when PodResources becomes unavailable and available again.
type poller struct{ failing bool }

func (p *poller) poll(ctx context.Context, w *Watcher) {
	// Any List that began after the last one serves.
	_, err := w.list(ctx, w.Latest().seq+1)
	switch {
	case err != nil:
		if !p.failing && ctx.Err() == nil {
			w.cfg.Logger.Warn("pod resources unavailable; retrying at the poll interval", "err", err)
		}
		p.failing = true
	case p.failing:
		w.cfg.Logger.Info("pod resources available again")
		p.failing = false
	}
}

// checkpointChanged re-reads the checkpoint, which costs no List, and
// lists only when it names an allocation first read after the last List
// began: the pod that will ask PreStart for it is then already listed. A
// burst of writes costs one List at most.
func (w *Watcher) checkpointChanged(ctx context.Context) {
	ck := w.readCheckpoint()
	newest := ck.newest()
	if newest <= w.Latest().seq {
		return
	}
	if _, err := w.list(ctx, newest+1); err != nil && ctx.Err() == nil {
		w.cfg.Logger.Debug("list after a kubelet checkpoint change", "err", err)
	}
}

// readCheckpoint reads the kubelet's device checkpoint, keeps it as the
// latest and announces a change of what it names. A file that cannot be
// read or parsed gives an unknown checkpoint, which proves nothing.
func (w *Watcher) readCheckpoint() *Checkpoint {
	ck, changed := w.checkpoints.read()
	if changed {
		w.announce()
	}
	return ck
}

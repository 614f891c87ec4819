package podwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// entry is one allocation of the kubelet's device checkpoint.
type entry struct {
	uid, container, resource string
	ids                      []string
}

// writeKubeletCheckpoint writes the device manager's checkpoint as the
// kubelet does: a temporary file renamed over the old one.
func writeKubeletCheckpoint(t *testing.T, dir string, entries ...entry) {
	t.Helper()
	type podEntry struct {
		PodUID        string
		ContainerName string
		ResourceName  string
		DeviceIDs     map[string][]string
		AllocResp     []byte
	}
	var cp struct {
		Data struct {
			PodDeviceEntries  []podEntry
			RegisteredDevices map[string][]string
		}
		Checksum uint64
	}
	for _, e := range entries {
		cp.Data.PodDeviceEntries = append(cp.Data.PodDeviceEntries, podEntry{PodUID: e.uid, ContainerName: e.container,
			ResourceName: e.resource, DeviceIDs: map[string][]string{"0": e.ids}, AllocResp: []byte{10, 0}})
	}
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tmp-"+KubeletCheckpointName)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, KubeletCheckpointName)); err != nil {
		t.Fatal(err)
	}
}

// scriptedLister answers List from what the test sets; a List can be held
// at a gate, and errors can be queued for the next calls.
type scriptedLister struct {
	mu      sync.Mutex
	pods    []*podresourcesv1.PodResources
	errs    []error       // returned, one each, by the next calls
	gate    chan struct{} // if set, each call waits for a value
	entered chan int      // if set, receives each call's number as it begins
	calls   int
}

func (l *scriptedLister) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest, _ ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.mu.Lock()
	l.calls++
	n, gate, entered := l.calls, l.gate, l.entered
	var err error
	if len(l.errs) > 0 {
		err, l.errs = l.errs[0], l.errs[1:]
	}
	l.mu.Unlock()
	if entered != nil {
		entered <- n
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The response tells which call made it: its first pod is "call-N".
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podRes("calls", fmt.Sprintf("call-%d", n), ctr("main", dev(cxi, fmt.Sprintf("marker-%d", n)))),
	}}
	resp.PodResources = append(resp.PodResources, l.pods...)
	return resp, nil
}

func (l *scriptedLister) set(pods ...*podresourcesv1.PodResources) {
	l.mu.Lock()
	l.pods = pods
	l.mu.Unlock()
}

func (l *scriptedLister) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// callOf tells which List call made a snapshot.
func callOf(s *Snapshot) string {
	for key := range s.Pods {
		if name, ok := cutPrefix(key, "calls/"); ok {
			return name
		}
	}
	return ""
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

var (
	podA = Holder{Namespace: "ns", Name: "a", UID: "uid-a", Devices: map[string][]string{cxi: {"nic0"}}}
	entA = entry{"uid-a", "main", cxi, []string{"nic0"}}
	entB = entry{"uid-b", "main", cxi, []string{"nic1"}}
	resA = podRes("ns", "a", ctr("main", dev(cxi, "nic0")))
	resB = podRes("ns", "b", ctr("main", dev(cxi, "nic1")))
)

// The rule: a pod is gone only when the last successful List and the
// kubelet's device checkpoint both no longer name it; an empty, short or
// failed read proves nothing.
func TestGone(t *testing.T) {
	noUID := Holder{Namespace: "ns", Name: "a", Devices: map[string][]string{cxi: {"nic0"}}}
	tests := []struct {
		name    string
		pods    []*podresourcesv1.PodResources
		listErr error
		ckpt    []entry // nil with raw == "" and absent == false: an empty checkpoint
		raw     string  // written as the checkpoint's content
		absent  bool    // no checkpoint file
		holder  Holder
		want    bool
	}{
		{name: "listed and in the checkpoint", pods: []*podresourcesv1.PodResources{resA}, ckpt: []entry{entA}, holder: podA},
		{name: "kubelet restarted: List empty, checkpoint unchanged", ckpt: []entry{entA, entB}, holder: podA},
		{name: "listed, checkpoint rewritten without it", pods: []*podresourcesv1.PodResources{resA}, ckpt: []entry{entB}, holder: podA},
		{name: "neither names it", pods: []*podresourcesv1.PodResources{resB}, ckpt: []entry{entB}, holder: podA, want: true},
		{name: "no checkpoint file names nobody", absent: true, holder: podA, want: true},
		{name: "checkpoint unparsable", raw: "{not json", holder: podA},
		{name: "checkpoint entry without UID", raw: `{"Data":{"PodDeviceEntries":[{"ResourceName":"x"}]}}`, holder: podA},
		{name: "no List has succeeded", listErr: status.Error(codes.Unavailable, "kubelet down"), holder: podA},
		{name: "device handed to another pod", pods: []*podresourcesv1.PodResources{podRes("ns", "c", ctr("main", dev(cxi, "nic0")))},
			ckpt: []entry{{"uid-c", "main", cxi, []string{"nic0"}}}, holder: podA, want: true},
		{name: "same name, new UID", pods: []*podresourcesv1.PodResources{resA}, ckpt: []entry{{"uid-a2", "main", cxi, []string{"nic0"}}},
			holder: podA, want: true},
		{name: "UID never known, its device still in the checkpoint", ckpt: []entry{{"uid-x", "main", cxi, []string{"nic0"}}}, holder: noUID},
		{name: "UID never known, its device free", ckpt: []entry{entB}, holder: noUID, want: true},
		{name: "another resource's allocation does not count", ckpt: []entry{{"uid-a", "main", "nvidia.com/gpu", []string{"gpu0"}}},
			holder: podA, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			switch {
			case tt.raw != "":
				if err := os.WriteFile(filepath.Join(dir, KubeletCheckpointName), []byte(tt.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			case !tt.absent:
				writeKubeletCheckpoint(t, dir, tt.ckpt...)
			}
			lister := &scriptedLister{pods: tt.pods}
			if tt.listErr != nil {
				lister.errs = []error{tt.listErr}
			}
			w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir})
			if _, err := w.Refresh(t.Context()); (err != nil) != (tt.listErr != nil) {
				t.Fatalf("Refresh = %v", err)
			}
			if got := w.Gone(tt.holder); got != tt.want {
				t.Fatalf("Gone = %v, want %v", got, tt.want)
			}
		})
	}
}

// A failed List after a successful one proves nothing either: the last
// successful List and the checkpoint still decide.
func TestGoneKeepsTheLastSuccessfulList(t *testing.T) {
	dir := t.TempDir()
	writeKubeletCheckpoint(t, dir, entA)
	lister := &scriptedLister{pods: []*podresourcesv1.PodResources{resA}}
	w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir})
	if _, err := w.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	lister.set()
	lister.errs = []error{errors.New("kubelet down")}
	if _, err := w.Refresh(t.Context()); err == nil {
		t.Fatal("Refresh succeeded")
	}
	if w.Gone(podA) || len(w.Latest().Pods) != 2 {
		t.Fatalf("a failed List changed the verdict or the snapshot: %v", w.Latest().Pods)
	}
}

// PreStart usually needs no List: the checkpoint, written at Allocate,
// names the pod's UID and container, and the last List names that pod.
// After the device went to another pod, the old List names the previous
// holder, and Find lists anew.
func TestFindUsesTheCheckpointAndListsOnlyWhenNeeded(t *testing.T) {
	dir := t.TempDir()
	writeKubeletCheckpoint(t, dir, entA)
	lister := &scriptedLister{pods: []*podresourcesv1.PodResources{resA}}
	w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir, MinListInterval: time.Nanosecond})
	if _, err := w.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	find := func(wantPod, wantUID string, wantCalls int) {
		t.Helper()
		p, c, err := w.Find(t.Context(), cxi, []string{"nic0"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Key() != wantPod || p.UID != wantUID || c != "main" {
			t.Fatalf("Find = %s uid %s container %s, want %s uid %s", p.Key(), p.UID, c, wantPod, wantUID)
		}
		if n := lister.count(); n != wantCalls {
			t.Fatalf("%d List calls, want %d", n, wantCalls)
		}
	}
	find("ns/a", "uid-a", 1) // a container restart: no List

	// Pod a exits and its device goes at once to pod b, whose Allocate
	// rewrote the checkpoint; the last List still names a.
	writeKubeletCheckpoint(t, dir, entry{"uid-b", "main", cxi, []string{"nic0"}})
	lister.set(podRes("ns", "b", ctr("main", dev(cxi, "nic0"))))
	find("ns/b", "uid-b", 2)
	find("ns/b", "uid-b", 2)

	// The checkpoint cannot tell: Find lists.
	if err := os.WriteFile(filepath.Join(dir, KubeletCheckpointName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	find("ns/b", "", 3)
}

// Concurrent callers share Lists, and each gets a List that began after
// it called: the one running when they call is too old for them.
func TestRefreshSharesTheNextList(t *testing.T) {
	const callers = 8
	lister := &scriptedLister{gate: make(chan struct{}), entered: make(chan int, 4)}
	w := New(Config{Lister: lister, Resources: []string{cxi}, MinListInterval: time.Nanosecond})
	waiting := make(chan struct{}, 2*callers)
	w.onWait = func() { waiting <- struct{}{} }

	first := make(chan *Snapshot, 1)
	go func() {
		s, _ := w.Refresh(t.Context())
		first <- s
	}()
	recvInt(t, lister.entered) // List 1 is running

	var wg sync.WaitGroup
	got := make([]string, callers)
	for i := range callers {
		wg.Go(func() {
			s, err := w.Refresh(t.Context())
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = callOf(s)
		})
	}
	for range callers {
		waitSignal(t, waiting, "a caller waiting") // every caller waits for List 1 to end
	}
	lister.gate <- struct{}{} // List 1 ends
	if s := <-first; callOf(s) != "call-1" {
		t.Fatalf("the first caller got %s", callOf(s))
	}
	recvInt(t, lister.entered) // one of them starts List 2
	for range callers - 1 {
		waitSignal(t, waiting, "a caller waiting") // the others wait for it
	}
	lister.gate <- struct{}{}
	wg.Wait()
	for i, c := range got {
		if c != "call-2" {
			t.Fatalf("caller %d got %s, want call-2: %v", i, c, got)
		}
	}
	if n := lister.count(); n != 2 {
		t.Fatalf("%d List calls for %d callers, want 2", n, callers+1)
	}
}

func recvInt(t *testing.T, ch <-chan int) int {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return 0
	}
}

// The kubelet refuses Lists beyond its rate limit with ResourceExhausted:
// they are retried with backoff within the caller's context; other errors
// are returned at once.
func TestListRetriesRateLimitRefusals(t *testing.T) {
	limited := status.Error(codes.ResourceExhausted, "rejected by rate limit")
	tests := []struct {
		name      string
		errs      []error
		wantErr   error
		wantCode  codes.Code
		wantCalls int
	}{
		{name: "refused three times", errs: []error{limited, limited, limited}, wantCalls: 4},
		{name: "refused past the attempts", errs: slices.Repeat([]error{limited}, 6), wantCode: codes.ResourceExhausted, wantCalls: 5},
		{name: "unavailable: at once", errs: []error{status.Error(codes.Unavailable, "down")}, wantCode: codes.Unavailable, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lister := &scriptedLister{errs: tt.errs}
			var waits []time.Duration
			retry := backoff.Policy{Initial: 20 * time.Millisecond, Max: time.Second, Factor: 2, Attempts: 5,
				Wait: func(ctx context.Context, d time.Duration) error {
					waits = append(waits, d)
					return ctx.Err()
				}}
			w := New(Config{Lister: lister, Resources: []string{cxi}, MinListInterval: time.Nanosecond, Retry: retry})
			_, err := w.Refresh(t.Context())
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("Refresh = %v, want code %v", err, tt.wantCode)
			}
			if n := lister.count(); n != tt.wantCalls {
				t.Fatalf("%d calls, want %d (waits %v)", n, tt.wantCalls, waits)
			}
		})
	}

	// The caller's deadline ends the retries.
	lister := &scriptedLister{errs: slices.Repeat([]error{limited}, 100)}
	ctx, cancel := context.WithCancel(t.Context())
	retry := backoff.Policy{Initial: time.Millisecond, Attempts: 100, Wait: func(ctx context.Context, _ time.Duration) error {
		if lister.count() == 3 {
			cancel()
		}
		return ctx.Err()
	}}
	w := New(Config{Lister: lister, Resources: []string{cxi}, MinListInterval: time.Nanosecond, Retry: retry})
	if _, err := w.Refresh(ctx); !errors.Is(err, context.Canceled) || lister.count() != 3 {
		t.Fatalf("Refresh = %v after %d calls, want canceled after 3", err, lister.count())
	}
}

// timedLister takes took of the test's clock to answer each List.
type timedLister struct {
	Lister
	clock *fakeClock
	took  time.Duration
}

func (l timedLister) List(ctx context.Context, in *podresourcesv1.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.clock.advance(l.took)
	return l.Lister.List(ctx, in, opts...)
}

// OnList is told of every List call, the retries of a refused one
// included, with its result and how long it took.
func TestOnListIsToldOfEveryCall(t *testing.T) {
	type call struct {
		result ListResult
		took   time.Duration
	}
	limited := status.Error(codes.ResourceExhausted, "rejected by rate limit")
	clock := &fakeClock{now: time.Unix(1000, 0)}
	lister := &scriptedLister{pods: []*podresourcesv1.PodResources{resA}}
	var calls []call
	retry := backoff.Policy{Initial: time.Millisecond, Attempts: 5, Wait: func(ctx context.Context, _ time.Duration) error {
		return ctx.Err()
	}}
	w := New(Config{Lister: timedLister{Lister: lister, clock: clock, took: 3 * time.Millisecond}, Resources: []string{cxi},
		MinListInterval: time.Nanosecond, Retry: retry, Now: clock.Now,
		OnList: func(r ListResult, took time.Duration) { calls = append(calls, call{r, took}) }})

	lister.errs = []error{limited, limited}
	if _, err := w.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	lister.errs = []error{status.Error(codes.Unavailable, "kubelet down")}
	if _, err := w.Refresh(t.Context()); err == nil {
		t.Fatal("Refresh succeeded")
	}
	ms := 3 * time.Millisecond
	want := []call{{ListRateLimited, ms}, {ListRateLimited, ms}, {ListOK, ms}, {ListError, ms}}
	if !slices.Equal(calls, want) {
		t.Fatalf("OnList told %v, want %v", calls, want)
	}
}

// Checkpoint writes cost a re-read of the file, and a List only when they
// name an allocation the last List could not know: a burst of them costs
// one List at most. The burst is written, then its events delivered; an
// event of another file after them tells when they have been handled.
func TestCheckpointBurstCostsOneListAtMost(t *testing.T) {
	tests := []struct {
		name      string
		write     func(t *testing.T, dir string, i int)
		wantLists int // after Run's first
	}{
		{name: "new pods", wantLists: 1, write: func(t *testing.T, dir string, i int) {
			es := []entry{entA, entB}
			for j := range i + 1 {
				es = append(es, entry{fmt.Sprintf("uid-%d", j), "main", cxi, []string{fmt.Sprintf("nic%d", j+2)}})
			}
			writeKubeletCheckpoint(t, dir, es...)
		}},
		{name: "rewrites of the same allocations", wantLists: 0, write: func(t *testing.T, dir string, _ int) {
			writeKubeletCheckpoint(t, dir, entA, entB)
		}},
		{name: "pods leaving", wantLists: 0, write: func(t *testing.T, dir string, i int) {
			if i%2 == 0 {
				writeKubeletCheckpoint(t, dir, entB)
			} else {
				writeKubeletCheckpoint(t, dir)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeKubeletCheckpoint(t, dir, entA, entB)
			lister := &scriptedLister{pods: []*podresourcesv1.PodResources{resA, resB}}
			events := make(chan fsnotify.Event)
			w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir, Ticks: make(chan time.Time),
				Events: events, MinListInterval: time.Nanosecond})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			// The burst comes after Run's first List: one that ran after the
			// writes would already have seen them all.
			waitFor(t, w, "Run's first List", func() bool { return lister.count() >= 1 })
			const burst = 10
			for i := range burst {
				tt.write(t, dir, i)
			}
			cp := filepath.Join(dir, KubeletCheckpointName)
			for range burst {
				events <- fsnotify.Event{Name: cp, Op: fsnotify.Create}
			}
			// Run takes this only once it has handled the burst.
			events <- fsnotify.Event{Name: filepath.Join(dir, "kubelet.sock"), Op: fsnotify.Create}
			if n := lister.count() - 1; n != tt.wantLists {
				t.Fatalf("%d Lists for a burst of %d checkpoint writes, want %d", n, burst, tt.wantLists)
			}
		})
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// When a List no longer names a pod that the checkpoint still names, the
// kubelet has freed it in memory only; the watcher nudges it to rewrite
// the file, paced while the lag lasts (a restarted kubelet whose sources
// are not ready rewrites every pod back).
func TestNudgeWhenTheCheckpointLags(t *testing.T) {
	dir := t.TempDir()
	memory := []entry{entA, entB} // what the kubelet holds
	writeKubeletCheckpoint(t, dir, memory...)
	lister := &scriptedLister{pods: []*podresourcesv1.PodResources{resA, resB}}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	var nudges []string
	w := New(Config{Lister: lister, Resources: []string{cxi}, PluginDir: dir, MinListInterval: time.Nanosecond, Now: clock.Now,
		Nudge: func(r string) {
			nudges = append(nudges, r)
			writeKubeletCheckpoint(t, dir, memory...) // the kubelet writes from memory
		}})
	refresh := func(wantNudges int) {
		t.Helper()
		if _, err := w.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(nudges) != wantNudges {
			t.Fatalf("%d nudges, want %d", len(nudges), wantNudges)
		}
	}
	refresh(0)

	// Pod a exits: the List lacks it, the checkpoint lags.
	memory = []entry{entB}
	lister.set(resB)
	refresh(1)
	if w.Gone(podA) {
		t.Fatal("gone before the checkpoint was read again")
	}
	refresh(1) // the rewrite is read: no lag, no nudge
	if !w.Gone(podA) {
		t.Fatal("pod a not gone after the rewrite")
	}

	// The kubelet restarts; its sources are not ready: the List is empty
	// and every rewrite still names pod b.
	lister.set()
	podB := Holder{Namespace: "ns", Name: "b", UID: "uid-b"}
	refresh(2)
	refresh(2) // outstanding: no second nudge before its wait
	clock.advance(DefaultNudgeBackoff.Initial)
	refresh(3)
	clock.advance(DefaultNudgeBackoff.Initial) // the wait doubled
	refresh(3)
	clock.advance(DefaultNudgeBackoff.Initial)
	refresh(4)
	if w.Gone(podB) {
		t.Fatal("a running pod taken for gone while the kubelet's sources were not ready")
	}
	// Sources ready: the List names b again and the pacing ends.
	lister.set(resB)
	refresh(4)
	lister.set()
	refresh(5)
}

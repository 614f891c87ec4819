package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
)

func nodeWith(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7"}, Spec: corev1.NodeSpec{Taints: taints}}
}

var otherTaint = corev1.Taint{Key: "example.com/maintenance", Value: "x", Effect: corev1.TaintEffectNoExecute}

// TestNodeTaints: set adds or removes the cleanup-stuck taint and keeps
// every other taint; it writes nothing when the node is already as
// wanted; a conflict is read again and retried, a bounded number of
// times; another error is returned.
func TestNodeTaints(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("changed"))
	tests := []struct {
		name        string
		node        *corev1.Node
		on          bool
		patchErrs   []error // answers to the patches, in turn; then success
		wantChanged bool
		wantErr     string
		wantTaints  []string
		wantPatches int
	}{
		{"add beside another taint", nodeWith(otherTaint), true, nil, true, "", []string{otherTaint.Key, CleanupTaintKey}, 1},
		{"add to a node without taints", nodeWith(), true, nil, true, "", []string{CleanupTaintKey}, 1},
		{"already there: nothing written", nodeWith(otherTaint, cleanupTaint), true, nil, false, "", []string{otherTaint.Key, CleanupTaintKey}, 0},
		{"remove, keeping the other", nodeWith(cleanupTaint, otherTaint), false, nil, true, "", []string{otherTaint.Key}, 1},
		{"remove the last taint", nodeWith(cleanupTaint), false, nil, true, "", nil, 1},
		{"already gone: nothing written", nodeWith(otherTaint), false, nil, false, "", []string{otherTaint.Key}, 0},
		{"a conflict is retried", nodeWith(otherTaint), true, []error{conflict, conflict}, true, "", []string{otherTaint.Key, CleanupTaintKey}, 3},
		{"conflicts past the bound", nodeWith(), true, []error{conflict, conflict, conflict, conflict, conflict}, false, "after 5 attempts", nil, 5},
		{"another error is returned", nodeWith(), true, []error{apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("policy"))}, false, "forbidden", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.node)
			var patches []string
			client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				p := a.(k8stesting.PatchAction)
				patches = append(patches, string(p.GetPatch()))
				if i := len(patches) - 1; i < len(tt.patchErrs) {
					return true, nil, tt.patchErrs[i]
				}
				return false, nil, nil // the tracker applies it
			})
			nt := nodeTaints{client: client, node: "n1"}
			changed, err := nt.set(t.Context(), tt.on)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("set: %v, want an error with %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("set: %v", err)
			}
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if len(patches) != tt.wantPatches {
				t.Errorf("%d patches, want %d: %q", len(patches), tt.wantPatches, patches)
			}
			for _, p := range patches {
				var body struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal([]byte(p), &body); err != nil || body.Metadata.ResourceVersion == "" {
					t.Errorf("patch %s carries no resourceVersion precondition", p)
				}
			}
			if tt.wantErr != "" {
				return
			}
			n, err := client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, tn := range n.Spec.Taints {
				keys = append(keys, tn.Key)
				if tn.Key == CleanupTaintKey && (tn.Effect != corev1.TaintEffectNoSchedule || tn.Value != "true") {
					t.Errorf("taint %+v, want %s=true:NoSchedule", tn, CleanupTaintKey)
				}
			}
			if strings.Join(keys, ",") != strings.Join(tt.wantTaints, ",") {
				t.Errorf("taints %v, want %v", keys, tt.wantTaints)
			}
			if has, err := nt.has(t.Context()); err != nil || has != tt.on {
				t.Errorf("has = %v, %v; want %v", has, err, tt.on)
			}
		})
	}
}

// TestKubeEvents: an event reaches the API server as an events.k8s.io
// Event on its object, with the catalogue's type, reason and action and
// the message of event.Message, from the agent's reporting controller.
func TestKubeEvents(t *testing.T) {
	client := fake.NewClientset()
	k := newKubeEvents(client)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := k.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.stop()
	k.Record(event.Pod("team-a", "trainer-0", "uid-1"), event.BindRefused, "Container main: lease VNI for team-a/trainer-0: controller unreachable")
	k.Record(event.Node("n1"), event.NodeCleanupStuck, "Services of pod team-a/old are still busy 5m0s after they ended")

	var got []eventsv1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = list.Items
		return len(got) >= 2, nil
	})
	if err != nil {
		t.Fatalf("%d events written, want 2: %v", len(got), err)
	}
	byReason := map[string]eventsv1.Event{}
	for _, e := range got {
		byReason[e.Reason] = e
	}
	pod := byReason[string(event.BindRefused)]
	info, _ := event.Lookup(event.BindRefused)
	if pod.Namespace != "team-a" || pod.Regarding.Kind != "Pod" || pod.Regarding.Name != "trainer-0" || string(pod.Regarding.UID) != "uid-1" ||
		pod.Type != corev1.EventTypeWarning || pod.Action != info.Action || pod.ReportingController != ReportingController {
		t.Errorf("pod event %+v", pod)
	}
	if !strings.HasPrefix(pod.Note, "Container main: lease VNI") || !strings.HasSuffix(pod.Note, info.Todo) {
		t.Errorf("pod event's note %q: want the cause, then what it means and what to do", pod.Note)
	}
	node := byReason[string(event.NodeCleanupStuck)]
	if node.Regarding.Kind != "Node" || node.Regarding.Name != "n1" || string(node.Regarding.UID) != "n1" || node.Namespace != metav1.NamespaceDefault {
		t.Errorf("node event regarding %+v in namespace %q", node.Regarding, node.Namespace)
	}
}

// fakeTaint is a node's taint in memory.
type fakeTaint struct {
	on     atomic.Bool
	sets   atomic.Int32
	failed atomic.Bool // set fails while true
}

func (f *fakeTaint) has(context.Context) (bool, error) { return f.on.Load(), nil }
func (f *fakeTaint) set(_ context.Context, on bool) (bool, error) {
	f.sets.Add(1)
	if f.failed.Load() {
		return false, errors.New("api server unreachable")
	}
	return f.on.Swap(on) != on, nil
}

// TestDrainWatch: services pending past drainAfter taint the node and tell
// their pods once; the taint goes when they are destroyed; a failed
// write is tried again at the next pass; a restart finds the taint and
// keeps it for services the record cannot date, and lifts it when
// nothing is pending.
func TestDrainWatch(t *testing.T) {
	now := time.Unix(10_000, 0)
	var pending []pendingDestroy
	after := &atomic.Int64{}
	after.Store(int64(5 * time.Minute))
	newWatch := func(taint taintSetter, ev *eventtest.Recorder) *drainWatch {
		return &drainWatch{node: "n1", after: after, pending: func() []pendingDestroy { return pending },
			taint: taint, events: ev, logger: testLoggerDiscard(), now: func() time.Time { return now }, stuckG: func(int) {}}
	}
	taint, ev := &fakeTaint{}, &eventtest.Recorder{}
	w := newWatch(taint, ev)
	pod := event.Pod("ns", "p", "u1")
	exited := now
	pending = []pendingDestroy{{owner: "pod ns/p", pods: []event.Object{pod}, services: []string{"cxi0:12"}, since: exited}}

	w.pass(t.Context())
	if taint.on.Load() || len(ev.Of(event.CleanupStuck)) != 0 {
		t.Fatal("tainted, or the pod told, before drainAfter")
	}
	now = exited.Add(5 * time.Minute)
	w.pass(t.Context())
	w.pass(t.Context())
	if !taint.on.Load() {
		t.Fatal("not tainted at drainAfter")
	}
	if n := len(ev.Of(event.CleanupStuck)); n != 1 {
		t.Fatalf("the pod was told %d times, want once", n)
	}
	if n := len(ev.Of(event.NodeCleanupStuck)); n != 1 {
		t.Fatalf("%d node events of the taint, want 1", n)
	}
	if e := ev.Of(event.CleanupStuck)[0]; e.Obj != pod || !strings.Contains(e.What, "cxi0:12") {
		t.Errorf("pod event %+v", e)
	}

	// Destroyed, but the API server is away: the taint stays until a
	// pass can remove it.
	pending = nil
	taint.failed.Store(true)
	w.pass(t.Context())
	if !taint.on.Load() {
		t.Fatal("taint gone although the write failed")
	}
	taint.failed.Store(false)
	w.pass(t.Context())
	if taint.on.Load() || len(ev.Of(event.NodeCleanupDone)) != 1 {
		t.Fatalf("taint %v after the services went, %d done events", taint.on.Load(), len(ev.Of(event.NodeCleanupDone)))
	}

	// A restart: the node carries the taint, and a claim's unprepare
	// (undated) is still pending: the taint stays.
	taint.on.Store(true)
	pending = []pendingDestroy{{owner: "claim ns/c", services: []string{"cxi1:40"}}}
	ev2 := &eventtest.Recorder{}
	w2 := newWatch(taint, ev2)
	sets := taint.sets.Load()
	w2.pass(t.Context())
	if !taint.on.Load() || taint.sets.Load() != sets {
		t.Fatal("a restart lifted (or rewrote) the taint of services still pending")
	}
	// A restart with nothing pending lifts it.
	pending = nil
	w3 := newWatch(taint, &eventtest.Recorder{})
	w3.pass(t.Context())
	if taint.on.Load() {
		t.Fatal("a restart with nothing pending kept the taint")
	}
	// Without the API (--no-kube) nothing is tainted and nothing breaks.
	pending = []pendingDestroy{{owner: "pod ns/q", pods: []event.Object{pod}, services: []string{"cxi0:13"}, since: now.Add(-time.Hour)}}
	ev4 := &eventtest.Recorder{}
	w4 := newWatch(nil, ev4)
	w4.pass(t.Context())
	if len(ev4.Of(event.CleanupStuck)) != 1 {
		t.Fatal("without a taint the pod is still told")
	}
}

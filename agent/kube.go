package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// ReportingController names the agent in the events it writes
// (events.k8s.io reportingController).
const ReportingController = "slingshot.hpe.com/slingshot-agent"

// kubeConfig is the kubeconfig file's configuration, or the in-cluster one.
func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("the agent needs the Kubernetes API (events, the cleanup-stuck taint, and with --api=dra its driver): no --kubeconfig and not in a pod; give --kubeconfig, or --no-kube to run without it: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// kubeEvents writes the agent's events through client-go's events.k8s.io
// broadcaster, which folds repeats into series. Limits are applied before
// it (event.Limited): see event.Limits.
type kubeEvents struct {
	b   events.EventBroadcaster
	rec events.EventRecorder
}

func newKubeEvents(client kubernetes.Interface) *kubeEvents {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	return &kubeEvents{b: b, rec: b.NewRecorder(scheme.Scheme, ReportingController)}
}

// start sends the recorded events to the API server until ctx ends; the
// broadcaster's goroutines are owned by ctx, and stop shuts it down.
func (k *kubeEvents) start(ctx context.Context) error {
	if err := k.b.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// stop ends the broadcaster: events recorded later are dropped.
func (k *kubeEvents) stop() { k.b.Shutdown() }

// Record writes the event, never blocking: the broadcaster queues it.
func (k *kubeEvents) Record(obj event.Object, reason event.Reason, what string) {
	info, ok := event.Lookup(reason)
	if !ok {
		return // every reason written is in the catalogue (a test checks)
	}
	ref := &corev1.ObjectReference{Kind: string(obj.Kind), APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name, UID: types.UID(obj.UID)}
	k.rec.Eventf(ref, nil, info.Type, string(reason), info.Action, "%s", event.Message(info, what))
}

// CleanupTaintKey is the node taint of a node whose CXI services of gone
// pods stay busy past cleanup.drainAfter.
const CleanupTaintKey = "cxi.slingshot.hpe.com/cleanup-stuck"

// cleanupTaint is the NoSchedule taint the node carries while it cannot
// clean up.
var cleanupTaint = corev1.Taint{Key: CleanupTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// nodeTaints puts the cleanup-stuck taint on the node, or takes it off,
// through the API server. Node taints are an atomic list, so a patch
// replaces the whole list: it carries the resourceVersion it was computed
// from, and a node changed meanwhile (a conflict) is read again, a
// bounded number of times. Other taints are kept as they are.
type nodeTaints struct {
	client kubernetes.Interface
	node   string
}

// taintAttempts bounds the read-patch rounds of one change lost to
// concurrent writers of the node.
const taintAttempts = 5

// has reports whether the node carries the taint now.
func (t nodeTaints) has(ctx context.Context) (bool, error) {
	n, err := t.client.CoreV1().Nodes().Get(ctx, t.node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read node %s: %w", t.node, err)
	}
	return hasCleanupTaint(n.Spec.Taints), nil
}

// set makes the node carry the taint (on) or not. It reports whether it
// changed the node; a node already as wanted is not written.
func (t nodeTaints) set(ctx context.Context, on bool) (bool, error) {
	var last error
	for range taintAttempts {
		n, err := t.client.CoreV1().Nodes().Get(ctx, t.node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read node %s: %w", t.node, err)
		}
		want, changed := withCleanupTaint(n.Spec.Taints, on)
		if !changed {
			return false, nil
		}
		patch, err := taintPatch(n.ResourceVersion, want)
		if err != nil {
			return false, err
		}
		_, err = t.client.CoreV1().Nodes().Patch(ctx, t.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "slingshot-agent"})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) {
			return false, fmt.Errorf("patch node %s's taints: %w", t.node, err)
		}
		last = err
	}
	return false, fmt.Errorf("patch node %s's taints: still changing under us after %d attempts: %w", t.node, taintAttempts, last)
}

// hasCleanupTaint reports whether taints carry the cleanup-stuck taint
// (any value or effect of its key counts: an admin's edit is respected).
func hasCleanupTaint(taints []corev1.Taint) bool {
	return slices.ContainsFunc(taints, func(t corev1.Taint) bool { return t.Key == CleanupTaintKey })
}

// withCleanupTaint returns taints with the cleanup-stuck taint added (on)
// or removed, the others in their order, and whether that changed them.
func withCleanupTaint(taints []corev1.Taint, on bool) ([]corev1.Taint, bool) {
	if on == hasCleanupTaint(taints) {
		return taints, false
	}
	if on {
		t := cleanupTaint
		now := metav1.Now()
		t.TimeAdded = &now
		return append(slices.Clone(taints), t), true
	}
	return slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool { return t.Key == CleanupTaintKey }), true
}

// taintPatch is a JSON merge patch that sets the node's taints to want,
// valid only on the node at resourceVersion rv: the API server answers a
// conflict if it changed since.
func taintPatch(rv string, want []corev1.Taint) ([]byte, error) {
	if rv == "" {
		return nil, errors.New("node has no resourceVersion")
	}
	if want == nil {
		want = []corev1.Taint{} // null would be read as "delete the field", which is fine too; [] is explicit
	}
	p := map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"spec":     map[string]any{"taints": want},
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("taint patch: %w", err)
	}
	return b, nil
}

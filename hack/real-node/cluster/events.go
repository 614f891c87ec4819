package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// AgentController is the reporting controller of the agent's events.
const AgentController = "slingshot.hpe.com/slingshot-agent"

// WaitAgentEvent waits (up to two minutes) for an event of reason in ns
// on an object of kind, and name when not "", and returns its note. An
// event of that reason reported by anyone but the agent is an error.
func (e *Env) WaitAgentEvent(ctx context.Context, ns, kind, name, reason string) (string, error) {
	var note string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.Node.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == reason && ev.Regarding.Kind == kind && (name == "" || ev.Regarding.Name == name) {
				if ev.ReportingController != AgentController {
					return false, fmt.Errorf("event %s reported by %q, want %q", reason, ev.ReportingController, AgentController)
				}
				note = ev.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no %s event on %s %s/%s: %w", reason, kind, ns, name, err)
	}
	return note, nil
}

// WaitPodWarning waits (up to two minutes) for a warning event on a pod in
// ns (the pod named pod, when not "") whose message match accepts, and
// returns it as "Reason: message". Whoever reported it counts: a refusal
// the agent returns to the kubelet or the runtime reaches the pod in
// their events, not the agent's.
func (e *Env) WaitPodWarning(ctx context.Context, ns, pod string, match func(msg string) bool) (string, error) {
	var why string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.Node.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Pod" && (pod == "" || ev.InvolvedObject.Name == pod) && ev.Type == corev1.EventTypeWarning && match(ev.Message) {
				why = fmt.Sprintf("%s: %s", ev.Reason, ev.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("warning event on a pod in %s: %w", ns, err)
	}
	return why, nil
}

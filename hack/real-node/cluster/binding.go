package cluster

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// SetBindingConditions upgrades the release to HEAD with the chart's
// dra.bindingConditions on or off, and waits until the node's
// ResourceSlices say so on every device and the controller and the agent
// run the new arguments, Ready.
func (e *Env) SetBindingConditions(ctx context.Context, on bool) error {
	if _, err := e.Upgrade(ctx, e.Head, map[string]any{"dra": map[string]any{"bindingConditions": on}}); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := e.ResourceSlices(ctx)
		if err != nil || len(slices) == 0 {
			return false, nil
		}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				if (len(d.BindingConditions) > 0) != on {
					return false, nil
				}
			}
		}
		return e.controllerRolledOut(ctx)
	})
	if err != nil {
		return fmt.Errorf("binding conditions %v on every device, the controller rolled out: %w\n%s", on, err, e.Describe(ctx))
	}
	return e.WaitDaemonSetReady(ctx, ReleaseName+"-agent")
}

// controllerRolledOut says whether the controller's Deployment runs its
// latest template only, every replica Ready.
func (e *Env) controllerRolledOut(ctx context.Context) (bool, error) {
	d, err := e.Node.Client.AppsV1().Deployments(Namespace).Get(ctx, ControllerDeployment, metav1.GetOptions{})
	if err != nil {
		return false, nil
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.ReadyReplicas == want, nil
}

// StopController scales the controller to no replica and waits until its
// pods are gone.
func (e *Env) StopController(ctx context.Context) error {
	if err := e.scaleController(ctx, 0); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.controllerPods(ctx)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("controller stopped: %w\n%s", err, e.Describe(ctx))
	}
	return nil
}

// StartController scales the controller back to one replica and returns
// when its pod was first seen Ready (polled every 50 ms): the moment it
// answers again.
func (e *Env) StartController(ctx context.Context) (time.Time, error) {
	if err := e.scaleController(ctx, 1); err != nil {
		return time.Time{}, err
	}
	var ready time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.controllerPods(ctx)
		if err != nil {
			return false, nil
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready = time.Now()
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("controller started: %w\n%s", err, e.Describe(ctx))
	}
	return ready, nil
}

func (e *Env) scaleController(ctx context.Context, replicas int32) error {
	_, err := e.Node.Client.AppsV1().Deployments(Namespace).UpdateScale(ctx, ControllerDeployment,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: ControllerDeployment, Namespace: Namespace}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}},
		metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("scale %s to %d: %w", ControllerDeployment, replicas, err)
	}
	return nil
}

func (e *Env) controllerPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := e.Node.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: ControllerSelector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

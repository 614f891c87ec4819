package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// NewNamespace makes a namespace with a generated name for one test.
func (e *Env) NewNamespace(ctx context.Context, prefix string) (string, error) {
	return e.createNamespace(ctx, metav1.ObjectMeta{GenerateName: prefix + "-"})
}

// NamedNamespace makes the namespace name, for a test whose configuration
// names it (a policy by namespace); DeleteNamespaceWait lets the next test
// make it again.
func (e *Env) NamedNamespace(ctx context.Context, name string) error {
	_, err := e.createNamespace(ctx, metav1.ObjectMeta{Name: name})
	return err
}

// createNamespace makes the namespace and waits for its ServiceAccount,
// which the controller-manager makes.
func (e *Env) createNamespace(ctx context.Context, meta metav1.ObjectMeta) (string, error) {
	ns, err := e.Node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: meta}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.Node.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return ns.Name, fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns.Name, err)
	}
	return ns.Name, nil
}

// DeleteNamespace deletes a test's namespace, not waiting for it to go.
func (e *Env) DeleteNamespace(ctx context.Context, ns string) error {
	return e.Node.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// TestNamespace makes a namespace with a generated name for the test tb
// and deletes it at its end, not waiting for it to go (a failed delete is
// logged: the name is never used again).
func (e *Env) TestNamespace(tb testing.TB, prefix string) string {
	tb.Helper()
	ns, err := e.NewNamespace(tb.Context(), prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), time.Minute)
		defer cancel()
		if err := e.DeleteNamespace(ctx, ns); err != nil {
			tb.Logf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

// UseNamespace makes the namespace name for the test tb and deletes it at
// its end, waiting until it is gone so that the next test can make it
// again: for tests whose configuration names a namespace (JobOptions).
func (e *Env) UseNamespace(tb testing.TB, name string) string {
	tb.Helper()
	if err := e.NamedNamespace(tb.Context(), name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.DeleteNamespaceWait(ctx, name); err != nil {
			tb.Error(err)
		}
	})
	return name
}

// StorageVNI is the named VNI "storage" of JobOptions: outside the
// controller's VNI range (the chart's 1024-65535) and not the default
// service's 1 or 10.
const StorageVNI = 900

// JobOptions are agent.config.jobOptions values that grant the namespace
// ns BULK_DATA and the storage VNI, everyone else the defaults.
func JobOptions(ns string) map[string]any {
	return map[string]any{
		"trafficClasses": map[string]any{"namespaces": map[string]any{ns: []any{"BULK_DATA"}}},
		"extraVNIs":      []any{map[string]any{"name": "storage", "vni": StorageVNI, "namespaces": []any{ns}}},
	}
}

// DeleteNamespaceWait deletes a test's namespace and waits until it is
// gone.
func (e *Env) DeleteNamespaceWait(ctx context.Context, ns string) error {
	c := e.Node.Client.CoreV1().Namespaces()
	if err := c.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s still there: %w", ns, err)
	}
	return nil
}

// Job is a Job of pods that run the workload image, each asking for
// nics of the NIC resource (0: none), all at once.
func Job(name string, pods, nics int) *batchv1.Job {
	limits := corev1.ResourceList{}
	if nics > 0 {
		limits[corev1.ResourceName(Resource)] = *resource.NewQuantity(int64(nics), resource.DecimalSI)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Parallelism:  ptr.To(int32(pods)),
			Completions:  ptr.To(int32(pods)),
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"e2e-job": name}},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					AutomountServiceAccountToken:  ptr.To(false),
					Containers: []corev1.Container{{
						Name: "main", Image: WorkloadImage, ImagePullPolicy: corev1.PullNever,
						Resources: corev1.ResourceRequirements{Limits: limits},
					}},
				},
			},
		},
	}
}

// RunJob creates job in ns and waits until all its pods run; it returns
// them.
func (e *Env) RunJob(ctx context.Context, ns string, job *batchv1.Job) ([]corev1.Pod, error) {
	if _, err := e.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create job %s/%s: %w", ns, job.Name, err)
	}
	return e.WaitRunning(ctx, ns, "e2e-job="+job.Name, int(*job.Spec.Parallelism))
}

// WaitRunning waits until want pods match selector in ns, all Running
// with every container started.
func (e *Env) WaitRunning(ctx context.Context, ns, selector string, want int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		if len(pods) != want {
			return false, nil
		}
		for _, p := range pods {
			if !Started(&p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d pods %q in %s running: %w\n%s", want, selector, ns, err, e.Describe(ctx))
	}
	return pods, nil
}

// RunJobToCompletion creates job in ns and waits until all its pods
// have Succeeded; it returns them. A pod that fails ends the wait, with
// its log in the error.
func (e *Env) RunJobToCompletion(ctx context.Context, ns string, job *batchv1.Job) ([]corev1.Pod, error) {
	if _, err := e.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create job %s/%s: %w", ns, job.Name, err)
	}
	selector := "e2e-job=" + job.Name
	want := int(*job.Spec.Completions)
	var pods []corev1.Pod
	var failed *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		done := 0
		for i, p := range pods {
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				done++
			case corev1.PodFailed:
				failed = &pods[i]
				return true, nil
			}
		}
		return done == want && len(pods) == want, nil
	})
	if failed != nil {
		return nil, fmt.Errorf("job %s/%s: pod %s failed: %s; its log:\n%s", ns, job.Name, failed.Name, containerStates(*failed), e.PodLog(ctx, ns, failed.Name))
	}
	if err != nil {
		return nil, fmt.Errorf("%d pods %q in %s succeeded: %w\n%s", want, selector, ns, err, e.Describe(ctx))
	}
	return pods, nil
}

// ScaleJob sets the Job's parallelism to pods: the Job controller starts
// pods up to it while completions remain.
func (e *Env) ScaleJob(ctx context.Context, ns, name string, pods int) error {
	patch := fmt.Appendf(nil, `{"spec":{"parallelism":%d}}`, pods)
	if _, err := e.Node.Client.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("scale job %s/%s to %d: %w", ns, name, pods, err)
	}
	return nil
}

// PodLog returns the log of the pod's only container through the API
// server (which asks the kubelet), or why it could not be read.
func (e *Env) PodLog(ctx context.Context, ns, name string) string {
	b, err := e.Node.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(log of %s/%s: %v)", ns, name, err)
	}
	return string(b)
}

// Started reports whether the pod is Running with every container
// started.
func Started(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// DeleteJob deletes a Job and lets the garbage collector delete its pods.
func (e *Env) DeleteJob(ctx context.Context, ns, name string) error {
	return e.Node.Client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
}

// WaitPodsGone waits until no pod matches selector in ns, and returns when
// that was first seen.
func (e *Env) WaitPodsGone(ctx context.Context, ns, selector string) (time.Time, error) {
	var left int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("pods %q in %s gone (%d left): %w", selector, ns, left, err)
	}
	return time.Now(), nil
}

// WaitReplaced waits until the pod with oldUID is gone and one other pod
// matching selector in ns is Ready, as after a DaemonSet replaced it.
func (e *Env) WaitReplaced(ctx context.Context, ns, selector string, oldUID types.UID) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		if len(list.Items) != 1 || list.Items[0].UID == oldUID {
			last = fmt.Sprintf("%d pods", len(list.Items))
			return false, nil
		}
		for _, c := range list.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		last = "new pod not ready"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("pod %q replaced: %w (%s)\n%s", selector, err, last, e.Describe(ctx))
	}
	return nil
}

// WaitNICsFree waits until no pod that is not finished holds the NIC
// resource, as after earlier tests' namespaces are gone: allocatable
// counts devices, not free ones.
func (e *Env) WaitNICsFree(ctx context.Context) error {
	var holders []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.Node.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		holders = holders[:0]
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range p.Spec.Containers {
				if _, ok := c.Resources.Limits[corev1.ResourceName(Resource)]; ok {
					holders = append(holders, p.Namespace+"/"+p.Name)
					break
				}
			}
		}
		return len(holders) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods still holding %s: %v: %w", Resource, holders, err)
	}
	return nil
}

// AgentSelector selects the agent's pods: the chart's component label.
const AgentSelector = "app.kubernetes.io/component=agent"

// DeleteAgentPod deletes the agent's one pod, as an operator restarting
// the agent would, and returns its UID: the DaemonSet makes a new one.
func (e *Env) DeleteAgentPod(ctx context.Context) (types.UID, error) {
	c := e.Node.Client.CoreV1().Pods(Namespace)
	old, err := c.List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return "", fmt.Errorf("agent pods: %w", err)
	}
	if len(old.Items) != 1 {
		return "", fmt.Errorf("agent pods: %d, want 1", len(old.Items))
	}
	if err := c.Delete(ctx, old.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		return "", fmt.Errorf("delete agent pod %s: %w", old.Items[0].Name, err)
	}
	return old.Items[0].UID, nil
}

// ReplaceAgentPod deletes the agent's pod and waits until the DaemonSet's
// new one is Ready.
func (e *Env) ReplaceAgentPod(ctx context.Context) error {
	old, err := e.DeleteAgentPod(ctx)
	if err != nil {
		return err
	}
	return e.WaitReplaced(ctx, Namespace, AgentSelector, old)
}

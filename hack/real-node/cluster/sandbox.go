package cluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/netns"
)

// Sandbox is a pod's sandbox as the node shows it: the pause process
// that holds the pod's namespaces, and its network namespace.
type Sandbox struct {
	Pid   int
	Netns uint32
}

// PodSandbox finds the sandbox of the pod with the given UID: its one
// pause process (the node's sandbox image, /pause). ok is false when the
// pod has none running (between a sandbox's death and the next).
func PodSandbox(uid string) (sb Sandbox, ok bool, err error) {
	procs, err := PodProcesses(uid)
	if err != nil {
		return Sandbox{}, false, err
	}
	var found []Process
	for _, p := range procs {
		if strings.HasSuffix(p.Exe, "/pause") {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return Sandbox{}, false, nil
	case 1:
	default:
		return Sandbox{}, false, fmt.Errorf("pod %s: pause processes %+v, want one", uid, found)
	}
	ino, err := netns.ParseNetnsLink(found[0].Netns)
	if err != nil {
		return Sandbox{}, false, fmt.Errorf("pod %s: pause pid %d: %w", uid, found[0].Pid, err)
	}
	return Sandbox{Pid: found[0].Pid, Netns: ino}, true, nil
}

// KillSandbox SIGKILLs the pause process of the pod with the given UID
// and returns the sandbox it ended. The kubelet sees the sandbox dead,
// kills the pod's containers, stops the sandbox (the runtime releases its
// network namespace) and makes a new one, in a new network namespace,
// where it starts the containers again: a pod whose restart policy is
// Always (AlwaysRestarting).
func KillSandbox(uid string) (Sandbox, error) {
	sb, ok, err := PodSandbox(uid)
	if err != nil {
		return Sandbox{}, err
	}
	if !ok {
		return Sandbox{}, fmt.Errorf("pod %s: no sandbox runs", uid)
	}
	if err := syscall.Kill(sb.Pid, syscall.SIGKILL); err != nil {
		return Sandbox{}, fmt.Errorf("pod %s: kill pause pid %d: %w", uid, sb.Pid, err)
	}
	return sb, nil
}

// WaitNewSandbox waits (up to two minutes) until the pod with the given
// UID has a sandbox other than old (another pause process) and returns
// it. Its network namespace is a new one, but its inode may be old's
// again, when nothing held old's.
func WaitNewSandbox(ctx context.Context, uid string, old Sandbox) (Sandbox, error) {
	var sb Sandbox
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var ok bool
		var err error
		sb, ok, err = PodSandbox(uid)
		switch {
		case err != nil:
			last = err.Error()
			return false, nil
		case !ok:
			last = "no pause process"
			return false, nil
		}
		last = fmt.Sprintf("sandbox %+v", sb)
		return sb.Pid != old.Pid, nil
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("pod %s: no sandbox made again after %+v: %w (last: %s)", uid, old, err, last)
	}
	return sb, nil
}

// WaitRunningAgain waits (up to three minutes) until the pod (by its
// namespace and name) is Running with every container started, with a
// sandbox other than old (another pause process), and its workload
// process in the sandbox's network namespace; it returns the pod and the
// sandbox. A pod whose
// sandbox was made again runs again with the same UID.
func (e *Env) WaitRunningAgain(ctx context.Context, pod corev1.Pod, old Sandbox) (corev1.Pod, Sandbox, error) {
	var cur corev1.Pod
	var sb Sandbox
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.Node.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		cur = *p
		if cur.UID != pod.UID {
			return false, fmt.Errorf("pod %s/%s: UID %s, was %s: the pod was made again, not its sandbox", pod.Namespace, pod.Name, cur.UID, pod.UID)
		}
		if !Started(&cur) {
			last = containerStates(cur)
			return false, nil
		}
		var ok bool
		sb, ok, err = PodSandbox(string(pod.UID))
		if err != nil || !ok || sb.Pid == old.Pid {
			last = fmt.Sprintf("started, sandbox %+v (%v, %v)", sb, ok, err)
			return false, nil
		}
		procs, err := PodProcesses(string(pod.UID))
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, pr := range procs {
			if strings.HasSuffix(pr.Exe, "/workload") && pr.Netns == fmt.Sprintf("net:[%d]", sb.Netns) {
				return true, nil
			}
		}
		last = fmt.Sprintf("started, sandbox %+v, no workload in its namespace among %+v", sb, procs)
		return false, nil
	})
	if err != nil {
		return cur, sb, fmt.Errorf("pod %s/%s running again after its sandbox %+v: %w (last: %s)\n%s", pod.Namespace, pod.Name, old, err, last, e.Describe(ctx))
	}
	return cur, sb, nil
}

// AlwaysRestarting is a pod of job's template, made alone (no Job owns
// it) with the job's name and RestartPolicy Always. The kubelet makes a
// pod's dead sandbox again only when its containers are to run again:
// with Never it ends the pod, and with OnFailure too, since it stops the
// workload with SIGTERM, on which it exits 0. No controller owns the pod,
// so it gets a pod-scoped VNI of its own (a job-scoped claim's too).
func AlwaysRestarting(job *batchv1.Job) *corev1.Pod {
	tmpl := job.Spec.Template.DeepCopy()
	p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	p.Name = job.Name
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return p
}

// RunPod creates pod in ns and waits until it runs with every container
// started; it returns it. The pod is found by its e2e-job label, as the
// pods of a Job (AlwaysRestarting).
func (e *Env) RunPod(ctx context.Context, ns string, pod *corev1.Pod) (corev1.Pod, error) {
	if _, err := e.Node.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return corev1.Pod{}, fmt.Errorf("create pod %s/%s: %w", ns, pod.Name, err)
	}
	pods, err := e.WaitRunning(ctx, ns, "e2e-job="+pod.Labels["e2e-job"], 1)
	if err != nil {
		return corev1.Pod{}, err
	}
	return pods[0], nil
}

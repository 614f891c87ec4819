package cluster

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// BindFailure is what differs, between the agent's front ends, in a pod
// of two NICs whose bind fails on the second one (issue 24): the device
// plugin makes the services at PreStart, so the driver refuses SVC_ALLOC;
// DRA makes them at prepare and binds them at the sandbox, so it refuses
// SVC_ENABLE. Both suites run the rest (BindFailOnSecondNIC) alike.
type BindFailure struct {
	// Op is the command the simulated cxi1 refuses with ENOSPC, the error
	// the real driver gives when the NIC's resources have run out.
	Op uapi.Op
	// Job makes, in ns, what the pod needs (a claim template) and returns
	// a Job named BindFailJob of one pod asking for both NICs.
	Job func(t *testing.T, ns string) *batchv1.Job
	// Unbound is called once the agent refused the bind, with the pod,
	// and returns a poll condition (and what it waits for, for the
	// failure): nothing of the failed bind is left admitting the pod, the
	// service made on cxi0 before cxi1 refused included. It may fail t on
	// what it must see first.
	Unbound func(t *testing.T, ctx context.Context, ns string, pod corev1.Pod) (what string, cond func(ctx context.Context) (state string, ok bool))
	// CheckRunning checks the pod once it runs, as the suite checks any
	// pod of its front end.
	CheckRunning func(t *testing.T, ctx context.Context, pod corev1.Pod)
}

// BindFailJob is the name of the Job of BindFailOnSecondNIC.
const BindFailJob = "bindfail"

// BindFailOnSecondNIC runs a pod of two NICs whose bind the simulated
// cxi1 refuses (b.Op, ENOSPC) in ns, and checks that the pod does not
// start; that the agent's own event on it names cxi1 and the driver's
// error and says what to do; that nothing of the failed bind is left
// (b.Unbound) while the kubelet retries; and that once cxi1 takes the
// command again the kubelet's retry starts the pod, bound as usual
// (b.CheckRunning).
func (e *Env) BindFailOnSecondNIC(t *testing.T, ns string, b BindFailure) {
	t.Helper()
	ctx := t.Context()
	clear, err := e.InjectFault("cxi1", sim.Fault{Op: b.Op, Errno: syscall.ENOSPC, Count: -1})
	if err != nil {
		t.Fatal(err)
	}
	cleared := false
	t.Cleanup(func() {
		if !cleared {
			if err := clear(); err != nil {
				t.Logf("after the test: %v", err)
			}
		}
	})
	job := b.Job(t, ns)
	// No grace: the namespace's deletion at the test's end need not wait
	// out the workload's.
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := e.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job %s/%s: %v", ns, job.Name, err)
	}
	why, err := e.WaitAgentEvent(ctx, ns, "Pod", "", "CXIBindRefused")
	if err != nil {
		t.Fatalf("%v\n%s", err, e.Describe(ctx))
	}
	t.Logf("event CXIBindRefused: %s", why)
	if !strings.Contains(why, "cxi1") || !strings.Contains(why, syscall.ENOSPC.Error()) || !strings.Contains(why, "What to do") {
		t.Errorf("event %q: want cxi1, %q and what to do", why, syscall.ENOSPC.Error())
	}

	pod := e.notStarted(t, ctx, ns)
	// The kubelet retries meanwhile, and each try binds cxi0 before cxi1
	// refuses: the condition must hold between tries, and a poll sees
	// it there, where one look could fall inside a try.
	what, cond := b.Unbound(t, ctx, ns, pod)
	var state string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var ok bool
		state, ok = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("after the failed bind, %s: %v (last: %s)\n%s", what, err, state, e.Describe(ctx))
	}
	e.notStarted(t, ctx, ns)

	cleared = true
	if err := clear(); err != nil {
		t.Fatal(err)
	}
	running, err := e.WaitRunning(ctx, ns, "job-name="+BindFailJob, 1)
	if err != nil {
		t.Fatalf("the pod did not start once cxi1 took %s again: %v\n%s", b.Op, err, e.Describe(ctx))
	}
	b.CheckRunning(t, ctx, running[0])
}

// notStarted checks that the one pod in ns has not started its container
// and returns it.
func (e *Env) notStarted(t *testing.T, ctx context.Context, ns string) corev1.Pod {
	t.Helper()
	pods, err := e.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("pods of the job in %s: %v", ns, err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("pods of the job in %s: %d, want 1", ns, len(pods.Items))
	}
	if Started(&pods.Items[0]) {
		t.Fatalf("the container started although its bind failed: %+v", pods.Items[0].Status.ContainerStatuses)
	}
	return pods.Items[0]
}

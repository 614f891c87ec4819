package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// agentStopped is the node label the agent's DaemonSet selects while
// KillAgent keeps the agent down: no node has it, so the DaemonSet
// controller neither keeps nor makes an agent pod anywhere.
const agentStopped = "slingshot-e2e/agent-stopped"

// AgentDown is the node's agent SIGKILLed and kept down (KillAgent) until
// Start.
type AgentDown struct {
	e *Env
	// Pod is the agent's pod that was killed, PID its process.
	Pod corev1.Pod
	PID int
	// Killed is when the agent was stopped, the moment from which it ran
	// no more.
	Killed time.Time
	// patched says the DaemonSet selects no node; started that Start
	// undid it.
	patched, started bool
}

// KillAgent kills the node's agent as a crash would and keeps it down:
// no agent runs on the node until Start. The kubelet restarts a killed
// container at once, so the agent's pod has to go first; its deletion
// has the kubelet send SIGTERM, which the agent would handle, so the
// agent is stopped (SIGSTOP) before anything else and runs no more:
//
//  1. SIGSTOP to the agent's process;
//  2. the DaemonSet made to select a label no node has, so that its
//     controller deletes the agent's pod and makes none;
//  3. once the kubelet's SIGTERM is pending (it is killing the container,
//     and does not restart a container of a pod being deleted), SIGKILL;
//  4. wait until the process and the pod are gone.
//
// What the agent holds in its process (descriptors of namespaces, its
// connections) ends with it; what it left on the node (its state
// directory, its namespace pins, the driver's services) stays, as after a
// crash. A cleanup of tb starts the agent again if the test left it down.
// One node only.
func (e *Env) KillAgent(tb testing.TB) *AgentDown {
	tb.Helper()
	ctx := tb.Context()
	pods, err := e.Node.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		tb.Fatalf("agent pods: %v", err)
	}
	if len(pods.Items) != 1 {
		tb.Fatalf("agent pods: %d, want 1", len(pods.Items))
	}
	d := &AgentDown{e: e, Pod: pods.Items[0]}
	procs, err := PodProcesses(string(d.Pod.UID))
	if err != nil {
		tb.Fatal(err)
	}
	var found []int
	for _, p := range procs {
		if strings.HasSuffix(p.Exe, "/slingshot-agent") {
			found = append(found, p.Pid)
		}
	}
	if len(found) != 1 {
		tb.Fatalf("agent pod %s: slingshot-agent processes %v among %+v, want one", d.Pod.Name, found, procs)
	}
	d.PID = found[0]
	tb.Cleanup(func() {
		if !d.patched || d.started {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), 3*time.Minute)
		defer cancel()
		if err := d.Start(ctx); err != nil {
			tb.Errorf("after the test, start the agent again: %v", err)
		}
	})

	if err := syscall.Kill(d.PID, syscall.SIGSTOP); err != nil {
		tb.Fatalf("stop the agent (pid %d): %v", d.PID, err)
	}
	d.Killed = time.Now()
	if err := e.selectAgentNodes(ctx, true); err != nil {
		_ = syscall.Kill(d.PID, syscall.SIGCONT)
		tb.Fatal(err)
	}
	d.patched = true
	var status string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var pending bool
		pending, status, err = sigtermPending(d.PID)
		return pending, err
	})
	if err != nil {
		tb.Fatalf("the kubelet never sent SIGTERM to the stopped agent (pid %d) of its deleted pod %s: %v (signals: %s)\n%s", d.PID, d.Pod.Name, err, status, e.Describe(ctx))
	}
	if err := syscall.Kill(d.PID, syscall.SIGKILL); err != nil {
		tb.Fatalf("kill the agent (pid %d): %v", d.PID, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", d.PID)); err == nil {
			return false, nil
		}
		list, err := e.Node.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		tb.Fatalf("the killed agent (pid %d, pod %s) is not gone: %v\n%s", d.PID, d.Pod.Name, err, e.Describe(ctx))
	}
	return d
}

// Start starts the agent again (the DaemonSet selects the node again) and
// waits until its new pod is Ready.
func (d *AgentDown) Start(ctx context.Context) error {
	if err := d.e.selectAgentNodes(ctx, false); err != nil {
		return err
	}
	d.started = true
	return d.e.WaitReplaced(ctx, Namespace, AgentSelector, d.Pod.UID)
}

// selectAgentNodes makes the agent's DaemonSet select no node (none has
// the label agentStopped) or, with stopped false, the nodes it selected
// before.
func (e *Env) selectAgentNodes(ctx context.Context, stopped bool) error {
	value := `null`
	if stopped {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:%s}}}}}`, agentStopped, value)
	_, err := e.Node.Client.AppsV1().DaemonSets(Namespace).Patch(ctx, ReleaseName+"-agent", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("agent DaemonSet node selector %s=%s: %w", agentStopped, value, err)
	}
	return nil
}

// sigtermPending reports whether SIGTERM is pending for process pid, with
// its pending-signal masks.
func sigtermPending(pid int) (bool, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, "", err
	}
	const term = 1 << (syscall.SIGTERM - 1)
	var masks []string
	pending := false
	for line := range strings.Lines(string(b)) {
		for _, field := range []string{"SigPnd:", "ShdPnd:"} {
			v, ok := strings.CutPrefix(line, field)
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			masks = append(masks, field+v)
			m, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return false, "", fmt.Errorf("/proc/%d/status %s %q: %w", pid, field, v, err)
			}
			pending = pending || m&term != 0
		}
	}
	return pending, strings.Join(masks, " "), nil
}

// PinDir is where the agent keeps its namespace pins, under its state
// directory (--pin-netns; agent/netns/pin).
const PinDir = "netns"

// Pins lists the namespace pins the node has under the agent's state
// directory, by path, with the inode of the network namespace each holds:
// bind mounts of nsfs files, seen in the node's mount namespace (this
// process's), where the agent's Bidirectional mount propagates them and
// where they outlive the agent's container. A file there that holds no
// namespace (a pin a crash left half made) is listed with inode 0.
func (e *Env) Pins() (map[string]uint32, error) {
	out := map[string]uint32{}
	root := filepath.Join(e.StateDir, PinDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		var sfs unix.Statfs_t
		if err := unix.Statfs(p, &sfs); err != nil {
			return fmt.Errorf("statfs %s: %w", p, err)
		}
		if sfs.Type != unix.NSFS_MAGIC {
			out[p] = 0
			return nil
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		out[p] = uint32(st.Ino)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("namespace pins in %s: %w", root, err)
	}
	return out, nil
}

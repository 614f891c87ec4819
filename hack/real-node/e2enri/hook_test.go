package e2enri

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// hookIndex is the hook's NRI plugin index: containerd calls its plugins
// in index order, and the agent's is 50 (agent/nri), so the hook runs
// first.
const hookIndex = "10"

// hookCall is one call of the runtime to the hook for a container of its
// namespace.
type hookCall struct {
	// Op is "create" (CreateContainer), "postcreate" (PostCreateContainer:
	// the container was made) or "start" (StartContainer).
	Op  string
	Pod string // namespace/name
	// Netns is the sandbox's network namespace inode, Admitting the
	// services of the node's driver that admitted it at a create, before
	// the hook changed anything.
	Netns     uint32
	Admitting []simstate.Service
	// Destroyed are the services the hook destroyed at this call,
	// "cxi0/5"; Err is what went wrong in the hook.
	Destroyed []string
	Err       error
}

// hook is an NRI plugin of the node's containerd that the runtime calls
// before the agent's, for the containers of one namespace: at each
// CreateContainer it reads the services admitting the sandbox's network
// namespace and, with destroy, at the first it destroys them through the
// driver's own command, behind the agent's back, as a driver reload (or an
// admin) would between the kubelet's PreStartContainer and the runtime's
// CreateContainer. It records each create, post-create and start. It
// never refuses anything itself.
type hook struct {
	ns      string
	destroy bool
	synced  chan struct{}

	mu        sync.Mutex
	calls     []hookCall
	destroyed bool
}

// startHook connects a hook for the containers of namespace ns (that
// destroys their services at the first create, with destroy) to the
// node's NRI socket and waits until containerd has synchronized it; it is
// disconnected at the test's end.
func startHook(t *testing.T, ns string, destroy bool) *hook {
	t.Helper()
	h := &hook{ns: ns, destroy: destroy, synced: make(chan struct{})}
	s, err := stub.New(h, stub.WithPluginName("e2e-hook"), stub.WithPluginIdx(hookIndex),
		stub.WithSocketPath(env.Node.NRISocket), stub.WithLogger(hookLog{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("NRI hook: %v", err)
	}
	t.Cleanup(s.Stop)
	// containerd adds a plugin to those it calls once it has answered
	// Synchronize.
	select {
	case <-h.synced:
	case <-time.After(time.Minute):
		t.Fatal("NRI hook: containerd never synchronized it")
	}
	return h
}

// Synchronize is the runtime's first call on the hook's connection.
func (h *hook) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	select {
	case <-h.synced:
	default:
		close(h.synced)
	}
	return nil, nil
}

// CreateContainer reads, and the first time destroys, the services
// admitting the sandbox's namespace.
func (h *hook) CreateContainer(_ context.Context, pod *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if pod.GetNamespace() != h.ns {
		return nil, nil, nil
	}
	call := hookCall{Op: "create", Pod: pod.GetNamespace() + "/" + pod.GetName()}
	call.Netns, call.Err = sandboxNetns(pod)
	if call.Err == nil {
		call.Admitting, call.Err = env.ServicesOf(call.Netns)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if call.Err == nil && h.destroy && !h.destroyed {
		h.destroyed = true
		for _, s := range call.Admitting {
			if err := env.DestroyService(s.NIC, s.ID); err != nil {
				call.Err = err
				break
			}
			call.Destroyed = append(call.Destroyed, fmt.Sprintf("%s/%d", s.NIC, s.ID))
		}
	}
	h.calls = append(h.calls, call)
	return nil, nil, nil
}

// PostCreateContainer records that the runtime made the container.
func (h *hook) PostCreateContainer(_ context.Context, pod *api.PodSandbox, _ *api.Container) error {
	h.record("postcreate", pod)
	return nil
}

// StartContainer records that the runtime starts the container.
func (h *hook) StartContainer(_ context.Context, pod *api.PodSandbox, _ *api.Container) error {
	h.record("start", pod)
	return nil
}

func (h *hook) record(op string, pod *api.PodSandbox) {
	if pod.GetNamespace() != h.ns {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, hookCall{Op: op, Pod: pod.GetNamespace() + "/" + pod.GetName()})
}

// Calls are the hook's calls so far, in order.
func (h *hook) Calls() []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// sandboxNetns is the inode of the sandbox's network namespace, by the
// path the runtime names it by (this process shares containerd's mount
// namespace: it is the node's init).
func sandboxNetns(pod *api.PodSandbox) (uint32, error) {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() != "network" {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(ns.GetPath(), &st); err != nil {
			return 0, fmt.Errorf("sandbox of %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
		}
		return uint32(st.Ino), nil
	}
	return 0, fmt.Errorf("sandbox of %s/%s: no network namespace", pod.GetNamespace(), pod.GetName())
}

// hookLog writes the NRI stub's warnings and errors to the test's output,
// prefixed; its chatter is dropped.
type hookLog struct{}

func (hookLog) Debugf(context.Context, string, ...any) {}
func (hookLog) Infof(context.Context, string, ...any)  {}
func (hookLog) Warnf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "NRI hook: "+format+"\n", args...)
}
func (hookLog) Errorf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "NRI hook: "+format+"\n", args...)
}

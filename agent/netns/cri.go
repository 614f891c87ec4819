package netns

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultCRITimeout bounds each CRI call of [CRI.Open].
const DefaultCRITimeout = 2 * time.Second

// PodUIDLabel is the sandbox label in which the kubelet puts the pod UID
// (kubelet pkg/kubelet/types/labels.go, KubernetesPodUIDLabel).
const PodUIDLabel = "io.kubernetes.pod.uid"

// DefaultCRISockets are the CRI sockets tried when none is configured:
// containerd's, then CRI-O's.
var DefaultCRISockets = []string{"/run/containerd/containerd.sock", "/var/run/crio/crio.sock"}

// RuntimeClient is the part of the CRI RuntimeService that [CRI] uses;
// runtimeapi.RuntimeServiceClient has it.
type RuntimeClient interface {
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, opts ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error)
}

// CRI resolves network namespaces through a container runtime's CRI
// RuntimeService (containerd, CRI-O). Unlike [Proc] it finds the namespace
// before any container of the pod runs, also where CRI-O runs no infra
// process. Safe for concurrent use; each call makes two CRI requests.
type CRI struct {
	// Client is the runtime's RuntimeService, from [DialCRI].
	Client RuntimeClient
	// ProcRoot is the host's proc mount, where /proc/<pid>/ns/net of a
	// sandbox pid the runtime names is read. Empty means "/proc".
	ProcRoot string
	// HostRoot is where the host's root file system is seen, to reach the
	// namespace paths the runtime names (/var/run/netns/...): the agent
	// uses <proc-root>/1/root. Empty or "/" means the paths are visible as
	// they are.
	HostRoot string
	// HostNetns is a file of the host's network namespace, to refuse a
	// pod that shares it. Empty means <ProcRoot>/1/ns/net.
	HostNetns string
	// Timeout bounds each CRI call; zero means [DefaultCRITimeout].
	Timeout time.Duration
}

// Open returns a [Handle] on the network namespace of the pod with the
// given UID: that of its newest ready sandbox. The caller closes it. It
// returns an error wrapping [ErrNotFound] (no ready sandbox, or the
// runtime names no namespace), [ErrHostNetwork], [ErrHostUnknown] (the
// host's namespace unreadable), [ErrNotNetns], [ErrBadInfo], or the CRI
// call's error.
func (c CRI) Open(ctx context.Context, podUID string) (*Handle, error) {
	info, sb, err := c.sandboxInfo(ctx, podUID)
	if err != nil {
		return nil, err
	}
	id := sb.GetId()
	h, where, err := c.openSandbox(info)
	if err != nil {
		return nil, fmt.Errorf("cri: network namespace of sandbox %s of pod %s: %w", id, podUID, err)
	}
	h.labels, h.annotations = sb.GetLabels(), sb.GetAnnotations()
	hostPath := c.HostNetns
	if hostPath == "" {
		hostPath = filepath.Join(c.procRoot(), "1", "ns", "net")
	}
	// Refused when unreadable: without it, a host-network pod could slip
	// through as a netns member that admits every host process.
	host, err := nsInode(hostPath, false)
	if err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("cri: %w: %w", ErrHostUnknown, err)
	}
	if h.Inode() == host {
		_ = h.Close()
		return nil, fmt.Errorf("%w: pod %s (%s)", ErrHostNetwork, podUID, where)
	}
	return h, nil
}

// sandboxInfo returns what the runtime says of the network namespace of
// the pod's newest ready sandbox, and that sandbox.
func (c CRI) sandboxInfo(ctx context.Context, podUID string) (SandboxInfo, *runtimeapi.PodSandbox, error) {
	if podUID == "" || strings.ContainsAny(podUID, "/\n") {
		return SandboxInfo{}, nil, fmt.Errorf("%w: bad pod UID %q", ErrNotFound, podUID)
	}
	sb, err := c.newestReadySandbox(ctx, podUID)
	if err != nil {
		return SandboxInfo{}, nil, err
	}
	id := sb.GetId()
	callCtx, cancel := context.WithTimeout(ctx, c.timeout())
	resp, err := c.Client.PodSandboxStatus(callCtx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	cancel()
	if err != nil {
		return SandboxInfo{}, nil, fmt.Errorf("cri: status of sandbox %s of pod %s: %w", id, podUID, err)
	}
	status := resp.GetStatus()
	if status.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return SandboxInfo{}, nil, fmt.Errorf("%w: pod %s (the runtime's sandbox status)", ErrHostNetwork, podUID)
	}
	if status.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return SandboxInfo{}, nil, fmt.Errorf("%w: sandbox %s of pod %s is %s", ErrNotFound, id, podUID, status.GetState())
	}
	raw, ok := resp.GetInfo()["info"]
	if !ok {
		return SandboxInfo{}, nil, fmt.Errorf("%w: sandbox %s of pod %s: the verbose status has no \"info\"", ErrBadInfo, id, podUID)
	}
	info, err := ParseSandboxInfo(raw)
	if err != nil {
		return SandboxInfo{}, nil, fmt.Errorf("cri: sandbox %s of pod %s: %w", id, podUID, err)
	}
	switch {
	case info.HostNetwork:
		return SandboxInfo{}, nil, fmt.Errorf("%w: pod %s (no network namespace in the sandbox's runtime spec)", ErrHostNetwork, podUID)
	case info.NetnsClosed:
		return SandboxInfo{}, nil, fmt.Errorf("%w: the runtime says the network namespace of sandbox %s of pod %s is closed", ErrNotFound, id, podUID)
	}
	return info, sb, nil
}

// openSandbox opens the sandbox's network namespace and returns the file
// it was opened from. The sandbox process is the surest way: its
// namespace is the pod's for as long as the sandbox is ready. The path is
// next, and the only way where CRI-O runs no infra process.
func (c CRI) openSandbox(info SandboxInfo) (*Handle, string, error) {
	var pidErr error
	if info.Pid > 0 {
		where := filepath.Join(c.procRoot(), strconv.Itoa(info.Pid), "ns", "net")
		h, err := openNs(where, true)
		if err == nil || info.NetnsPath == "" {
			return h, where, err
		}
		pidErr = err
	}
	if info.NetnsPath == "" {
		return nil, "", fmt.Errorf("%w: the runtime names neither a process nor a namespace path", ErrNotFound)
	}
	where, err := ResolveInRoot(c.HostRoot, info.NetnsPath)
	if err == nil {
		var h *Handle
		if h, err = openNs(where, true); err == nil {
			return h, where, nil
		}
	}
	if pidErr != nil {
		return nil, "", fmt.Errorf("%w (and by the sandbox process: %w)", err, pidErr)
	}
	return nil, "", err
}

// newestReadySandbox returns the ID of the pod's ready sandbox created
// last: after a sandbox is recreated the kubelet stops the old one, but
// for a moment both can be ready.
func (c CRI) newestReadySandbox(ctx context.Context, podUID string) (*runtimeapi.PodSandbox, error) {
	callCtx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	resp, err := c.Client.ListPodSandbox(callCtx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{PodUIDLabel: podUID},
	}})
	if err != nil {
		return nil, fmt.Errorf("cri: list sandboxes of pod %s: %w", podUID, err)
	}
	var best *runtimeapi.PodSandbox
	for _, sb := range resp.GetItems() {
		// The runtime filtered already; the check costs nothing.
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || sb.GetLabels()[PodUIDLabel] != podUID || sb.GetId() == "" {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(sb.GetCreatedAt(), best.GetCreatedAt()), strings.Compare(sb.GetId(), best.GetId())) > 0 {
			best = sb
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: the runtime has no ready sandbox of pod %s", ErrNotFound, podUID)
	}
	return best, nil
}

func (c CRI) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultCRITimeout
}

func (c CRI) procRoot() string {
	if c.ProcRoot == "" {
		return "/proc"
	}
	return c.ProcRoot
}

// DialCRI returns a RuntimeService client of the CRI socket at path. It
// does not connect: the first call does, and a runtime that is down makes
// that call fail at once. The caller closes the returned Closer.
func DialCRI(path string) (runtimeapi.RuntimeServiceClient, io.Closer, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("cri socket %s: %w", path, err)
	}
	return runtimeapi.NewRuntimeServiceClient(conn), conn, nil
}

// FindCRISocket returns the first of candidates that is a unix socket, and
// whether there was one. Each is looked for as it is (a socket mounted into
// the agent's container) and then under hostRoot, the host's root file
// system as [CRI.HostRoot] means it.
func FindCRISocket(hostRoot string, candidates ...string) (string, bool) {
	for _, c := range candidates {
		if isSocket(c) {
			return c, true
		}
		if hostRoot == "" || hostRoot == "/" {
			continue
		}
		if p, err := ResolveInRoot(hostRoot, c); err == nil && isSocket(p) {
			return p, true
		}
	}
	return "", false
}

package netns

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// holdEnv turns the test binary into a stand-in sandbox process: it sits
// in the namespace it was started in until its stdin closes.
const holdEnv = "SLINGSHOT_NETNS_TEST_HOLD"

func TestMain(m *testing.M) {
	if os.Getenv(holdEnv) == "1" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// namespaces are real network namespaces for a test.
type namespaces struct {
	podPid  int    // a process in the pod's namespace
	podPath string // a file of the pod's namespace, visible as it is
	podIno  uint32
	host    string // a file of the namespace that stands for the host's
}

// realNamespaces gives the test a pod namespace apart from its own, which
// plays the host's: a child process in a new network namespace (as root,
// or in a new user namespace where unprivileged ones are allowed). Where
// neither works the pod is this process and the host is stood in by this
// process's UTS namespace: another real nsfs inode, so every check but the
// namespace's type on the host's side still runs for real.
func realNamespaces(t *testing.T) namespaces {
	t.Helper()
	if pid, ok := startInNewNetns(t); ok {
		p := fmt.Sprintf("/proc/%d/ns/net", pid)
		return namespaces{podPid: pid, podPath: p, podIno: inodeOf(t, p), host: "/proc/self/ns/net"}
	}
	t.Log("no new network namespace possible here; the host's is stood in by our UTS namespace")
	return namespaces{podPid: os.Getpid(), podPath: "/proc/self/ns/net", podIno: inodeOf(t, "/proc/self/ns/net"), host: "/proc/self/ns/uts"}
}

func startInNewNetns(t *testing.T) (int, bool) {
	t.Helper()
	pid, _, ok := startNetnsProcess(t)
	return pid, ok
}

// startNetnsProcess starts a child process in a new network namespace (as
// root, or in a new user namespace where unprivileged ones are allowed)
// and returns its pid and a function that ends it and waits for it, which
// the test's cleanup also calls; ok is false where neither works.
func startNetnsProcess(t *testing.T) (pid int, stop func(), ok bool) {
	t.Helper()
	uid, gid := os.Getuid(), os.Getgid()
	for _, attr := range []*syscall.SysProcAttr{
		{Cloneflags: syscall.CLONE_NEWNET},
		{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), holdEnv+"=1")
		cmd.SysProcAttr = attr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			_ = stdin.Close()
			continue
		}
		stop := sync.OnceFunc(func() {
			_ = stdin.Close()
			_ = cmd.Wait()
		})
		t.Cleanup(stop)
		return cmd.Process.Pid, stop, true
	}
	return 0, nil, false
}

func inodeOf(t *testing.T, p string) uint32 {
	t.Helper()
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	ino, err := parseNsLink(target)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// parseNsLink parses any "<type>:[<inode>]" namespace link.
func parseNsLink(target string) (uint32, error) {
	var typ string
	var ino uint32
	if _, err := fmt.Sscanf(target, "%3s:[%d]", &typ, &ino); err != nil {
		return 0, fmt.Errorf("namespace link %q: %w", target, err)
	}
	return ino, nil
}

// fakeRuntime is a CRI RuntimeService with the two calls the agent makes,
// answering as containerd and CRI-O do: ListPodSandbox honours the filter,
// PodSandboxStatus returns "info" only when asked to be verbose.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	mu        sync.Mutex
	sandboxes []*runtimeapi.PodSandbox
	statuses  map[string]*runtimeapi.PodSandboxStatusResponse
	// hang makes every call wait for its deadline.
	hang bool
	// verboseAsked records the Verbose flag of each status request.
	verboseAsked []bool
}

func (f *fakeRuntime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	filter := req.GetFilter()
	var out []*runtimeapi.PodSandbox
	for _, sb := range f.sandboxes {
		if filter.GetId() != "" && sb.GetId() != filter.GetId() {
			continue
		}
		if filter.GetState() != nil && sb.GetState() != filter.GetState().GetState() {
			continue
		}
		matches := true
		for k, v := range filter.GetLabelSelector() {
			if sb.GetLabels()[k] != v {
				matches = false
			}
		}
		if matches {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *fakeRuntime) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verboseAsked = append(f.verboseAsked, req.GetVerbose())
	resp, ok := f.statuses[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q", req.GetPodSandboxId())
	}
	out := &runtimeapi.PodSandboxStatusResponse{Status: resp.GetStatus()}
	if req.GetVerbose() {
		out.Info = resp.GetInfo()
	}
	return out, nil
}

// add records a sandbox of the pod with the given verbose info.
func (f *fakeRuntime) add(id, podUID string, state runtimeapi.PodSandboxState, created int64, network runtimeapi.NamespaceMode, info map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	labels := map[string]string{PodUIDLabel: podUID, "io.kubernetes.pod.name": "p", "io.kubernetes.pod.namespace": "ns"}
	meta := &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: podUID}
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{Id: id, Metadata: meta, State: state, CreatedAt: created, Labels: labels})
	if f.statuses == nil {
		f.statuses = map[string]*runtimeapi.PodSandboxStatusResponse{}
	}
	f.statuses[id] = &runtimeapi.PodSandboxStatusResponse{
		Status: &runtimeapi.PodSandboxStatus{
			Id: id, Metadata: meta, State: state, CreatedAt: created, Labels: labels,
			Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
				Network: network, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
			}}},
		},
		Info: info,
	}
}

// serveCRI serves f on a real unix socket and returns a client of it.
func serveCRI(t *testing.T, f *fakeRuntime) RuntimeClient {
	t.Helper()
	sock := shortSocketPath(t)
	listenCRI(t, sock, f)
	return dialCRI(t, sock)
}

// listenCRI serves f on a unix socket at sock until the test ends.
func listenCRI(t *testing.T, sock string, f *fakeRuntime) {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

func dialCRI(t *testing.T, sock string) RuntimeClient {
	t.Helper()
	client, closer, err := DialCRI(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return client
}

// shortSocketPath returns a socket path in a fresh directory, short enough
// for sun_path (108 bytes) whatever the test's name.
func shortSocketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "cri.sock")
}

// pauseSpec is the OCI spec of a sandbox ("pause") container with the
// given namespaces.
func pauseSpec(ns ...specs.LinuxNamespace) *specs.Spec {
	return &specs.Spec{
		Version:  specs.Version,
		Process:  &specs.Process{Args: []string{"/pause"}, Cwd: "/", User: specs.User{UID: 65535, GID: 65535}},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "p",
		Linux: &specs.Linux{
			Namespaces:  ns,
			CgroupsPath: "kubepods-besteffort-pod" + uid + ".slice:cri-containerd:0123",
		},
	}
}

// containerdInfo returns the verbose info of a containerd sandbox, keyed
// and shaped as containerd 2.x writes it: toCRISandboxInfo in
// internal/cri/server/podsandbox/sandbox_status.go marshals a SandboxInfo
// (internal/cri/server/podsandbox/types/sandbox_info.go) under "info".
// withMetadata false gives containerd 1.7's pkg/cri/server shape, which
// has no "sandboxMetadata". netnsPath "" is the host network: the spec's
// network (and UTS) entries are removed
// (internal/cri/server/podsandbox/sandbox_run_linux.go).
func containerdInfo(t testing.TB, pid uint32, netnsPath string, closed, withMetadata bool) map[string]string {
	t.Helper()
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.MountNamespace}}
	if netnsPath != "" {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UTSNamespace}, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath})
	}
	config := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: uid},
		Labels:   map[string]string{PodUIDLabel: uid},
	}
	info := map[string]any{
		"pid":                pid,
		"processStatus":      "running",
		"netNamespaceClosed": closed,
		"image":              "registry.k8s.io/pause:3.10",
		"snapshotKey":        "0123",
		"snapshotter":        "overlayfs",
		"runtimeType":        "io.containerd.runc.v2",
		"runtimeOptions":     map[string]any{"systemd_cgroup": true},
		"config":             config,
		"runtimeSpec":        pauseSpec(ns...),
		"cniResult":          map[string]any{"Interfaces": map[string]any{"eth0": map[string]any{"IPConfigs": []any{}}}},
	}
	if withMetadata {
		// internal/cri/store/sandbox/metadata.go: untagged fields inside
		// a {"Version":"v1","Metadata":...} envelope.
		info["sandboxMetadata"] = map[string]any{"Version": "v1", "Metadata": map[string]any{
			"ID": "0123", "Name": "p_ns_" + uid + "_0", "Config": config, "NetNSPath": netnsPath,
			"IP": "10.244.1.7", "AdditionalIPs": nil, "RuntimeHandler": "", "CNIResult": nil, "ProcessLabel": "",
		}}
	}
	return map[string]string{"info": mustJSON(t, info)}
}

// crioInfo returns the verbose info of a CRI-O sandbox as
// server/sandbox_status.go createSandboxInfo writes it: {"image", "pid",
// "runtimeSpec"}, or only {"runtimeSpec"} when the infra container was
// dropped ("spoofed"). The namespaces are pinned under /var/run/<type>ns/
// (internal/config/nsmgr/nsmgr_linux.go).
func crioInfo(t testing.TB, pid int, netnsPath string, spoofed bool) map[string]string {
	t.Helper()
	spec := pauseSpec(
		specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/var/run/ipcns/5d2e0b8e-7d5c-4b4e-9d7a-0e6f1c2b3a4d"},
		specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath},
		specs.LinuxNamespace{Type: specs.UTSNamespace, Path: "/var/run/utsns/5d2e0b8e-7d5c-4b4e-9d7a-0e6f1c2b3a4d"},
		specs.LinuxNamespace{Type: specs.MountNamespace},
	)
	var info any = map[string]any{"image": "registry.k8s.io/pause:3.10", "pid": pid, "runtimeSpec": spec}
	if spoofed {
		info = map[string]any{"runtimeSpec": spec}
	}
	return map[string]string{"info": mustJSON(t, info)}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

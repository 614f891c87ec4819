package netns

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	ready    = runtimeapi.PodSandboxState_SANDBOX_READY
	notReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	podNet   = runtimeapi.NamespaceMode_POD
	nodeNet  = runtimeapi.NamespaceMode_NODE

	containerdNetns = "/var/run/netns/cni-6f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
	crioNetns       = "/var/run/netns/5d2e0b8e-7d5c-4b4e-9d7a-0e6f1c2b3a4d"
)

type criOpenCase struct {
	name string
	// setup fills the runtime; host overrides the host's namespace.
	setup   func(f *fakeRuntime)
	host    string
	procDir string // the proc root; "" is the real /proc
	want    uint32
	wantErr error
}

func TestCRIOpen(t *testing.T) {
	ns := realNamespaces(t)
	for _, tt := range criOpenCases(t, ns) {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRuntime{}
			tt.setup(f)
			c := CRI{Client: serveCRI(t, f), ProcRoot: tt.procDir, HostNetns: ns.host}
			if tt.host != "" {
				c.HostNetns = tt.host
			}
			checkOpen(t, c, tt.want, tt.wantErr)
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, v := range f.verboseAsked {
				if !v {
					t.Error("PodSandboxStatus asked without Verbose")
				}
			}
		})
	}
}

// checkOpen checks that the finder's Open holds the namespace want, or
// fails with wantErr, and that its Netns answers the same.
func checkOpen(t *testing.T, f Finder, want uint32, wantErr error) {
	t.Helper()
	h, err := f.Open(t.Context(), uid)
	if (wantErr == nil) != (err == nil) || !errors.Is(err, wantErr) || (err == nil) != (h != nil) {
		t.Fatalf("Open = %v, %v; want %v", h, err, wantErr)
	}
	if h != nil {
		defer h.Close()
		if h.Inode() != want || fdInode(t, h) != want {
			t.Fatalf("Open holds %d (descriptor of %d), want %d", h.Inode(), fdInode(t, h), want)
		}
	}
	got, err := openedInode(t.Context(), f, uid)
	if got != want || (wantErr == nil) != (err == nil) || !errors.Is(err, wantErr) {
		t.Fatalf("Open, Inode = %d, %v; want %d, %v", got, err, want, wantErr)
	}
}

// criOpenCases are TestCRIOpen's: each runtime's way of naming the
// namespace, and each way it can fail.
func criOpenCases(t *testing.T, ns namespaces) []criOpenCase {
	t.Helper()
	regular := filepath.Join(t.TempDir(), "not-a-namespace")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pid := uint32(ns.podPid)
	return []criOpenCase{
		{name: "containerd 2.x: the sandbox pid", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, pid, containerdNetns, false, true))
		}, want: ns.podIno},
		{name: "containerd 1.7: the sandbox pid, no sandboxMetadata", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, pid, containerdNetns, false, false))
		}, want: ns.podIno},
		{name: "containerd: sandbox process unseen, the netns path", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, 4242, ns.podPath, false, true))
		}, procDir: t.TempDir(), want: ns.podIno},
		{name: "containerd: neither the sandbox process nor the path", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, 4242, containerdNetns, false, true))
		}, procDir: t.TempDir(), wantErr: os.ErrNotExist},
		{name: "CRI-O with an infra container: the pid", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, crioInfo(t, ns.podPid, crioNetns, false))
		}, want: ns.podIno},
		{name: "CRI-O without an infra container: the pinned netns path", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, ns.podPath, true))
		}, want: ns.podIno},
		{name: "host network: the status's namespace options", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, nodeNet, containerdInfo(t, pid, "", false, true))
		}, wantErr: ErrHostNetwork},
		{name: "host network: no network namespace in the runtime spec", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, pid, "", false, true))
		}, wantErr: ErrHostNetwork},
		{name: "host network: CRI-O pins the host's namespace, status without options", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, runtimeapi.NamespaceMode_POD, crioInfo(t, 0, ns.podPath, true))
			f.statuses["sb1"].Status.Linux = nil
		}, host: ns.podPath, wantErr: ErrHostNetwork},
		{name: "host network: the sandbox process is in the host's namespace", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, pid, containerdNetns, false, true))
		}, host: ns.podPath, wantErr: ErrHostNetwork},
		{name: "no sandbox", setup: func(f *fakeRuntime) {
			f.add("sb1", "another-pod", ready, 100, podNet, containerdInfo(t, pid, containerdNetns, false, true))
		}, wantErr: ErrNotFound},
		{name: "two ready sandboxes: the newest wins", setup: func(f *fakeRuntime) {
			// The older one, and a newer one that is not ready, are in
			// the host's namespace: picking either fails.
			f.add("old", uid, ready, 100, podNet, crioInfo(t, 0, ns.host, true))
			f.add("new", uid, ready, 200, podNet, crioInfo(t, 0, ns.podPath, true))
			f.add("dying", uid, notReady, 300, podNet, crioInfo(t, 0, ns.host, true))
		}, want: ns.podIno},
		{name: "not-ready sandboxes only", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, notReady, 100, podNet, containerdInfo(t, pid, containerdNetns, false, true))
			f.add("sb2", uid, notReady, 200, podNet, containerdInfo(t, pid, containerdNetns, false, true))
		}, wantErr: ErrNotFound},
		{name: "containerd: network namespace closed", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, pid, containerdNetns, true, true))
		}, wantErr: ErrNotFound},
		{name: "malformed info JSON", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, map[string]string{"info": `{"pid": 12, "runtimeSpec": {"linux": {"namespaces": [{"type": "network", "path": `})
		}, wantErr: ErrBadInfo},
		{name: "no info in the verbose status", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, nil)
		}, wantErr: ErrBadInfo},
		{name: "neither pid nor path", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, map[string]string{"info": `{"runtimeSpec": {"linux": {"namespaces": [{"type": "network"}]}}}`})
		}, wantErr: ErrNotFound},
		{name: "the path is a plain file", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, regular, true))
		}, wantErr: ErrNotNetns},
		{name: "the path is a namespace of another type", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, "/proc/self/ns/uts", true))
		}, wantErr: ErrNotNetns},
		{name: "the path does not exist", setup: func(f *fakeRuntime) {
			f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, crioNetns+"-gone", true))
		}, wantErr: os.ErrNotExist},
	}
}

func TestCRIHostNetnsUnreadableRefuses(t *testing.T) {
	ns := realNamespaces(t)
	f := &fakeRuntime{}
	f.add("sb1", uid, ready, 100, podNet, crioInfo(t, 0, ns.podPath, true))
	c := CRI{Client: serveCRI(t, f), HostNetns: filepath.Join(t.TempDir(), "1", "ns", "net")}
	if h, err := c.Open(t.Context(), uid); !errors.Is(err, ErrHostUnknown) || h != nil {
		t.Fatalf("Open = %v, %v; want a refusal: the host's namespace is unknown", h, err)
	}
}

func TestCRIBadUID(t *testing.T) {
	c := CRI{Client: serveCRI(t, &fakeRuntime{})}
	for _, bad := range []string{"", "a/b", "a\nb"} {
		if h, err := c.Open(t.Context(), bad); !errors.Is(err, ErrNotFound) || h != nil {
			t.Errorf("Open(%q) = %v, %v; want ErrNotFound", bad, h, err)
		}
	}
}

// A runtime that does not answer costs one timeout per call, and the
// fallback answers.
func TestCRIHangsThenProc(t *testing.T) {
	ns := realNamespaces(t)
	f := &fakeRuntime{hang: true}
	c := CRI{Client: serveCRI(t, f), Timeout: 50 * time.Millisecond}
	_, err := c.Open(t.Context(), uid)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Open of a hung runtime = %v, want DeadlineExceeded", err)
	}
	fb := Fallback{First: c, Second: Proc{Root: proc(t, map[string]procEntry{
		"1":   {"0::/init.scope\n", ns.host},
		"200": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
	})}}
	h, err := fb.Open(t.Context(), uid)
	if err != nil || h.Inode() != ns.podIno {
		t.Fatalf("Fallback.Open = %v, %v; want /proc's %d", h, err, ns.podIno)
	}
	_ = h.Close()
}

func TestCRIDownFallsBackToProc(t *testing.T) {
	// A socket nobody listens on any more: the runtime is down.
	sock := shortSocketPath(t)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()
	client, closer, err := DialCRI(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	cri := CRI{Client: client}

	ns := realNamespaces(t)
	withPod := Proc{Root: proc(t, map[string]procEntry{
		"1":   {"0::/init.scope\n", ns.host},
		"200": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
	})}
	if got, err := openedInode(t.Context(), Fallback{First: cri, Second: withPod}, uid); err != nil || got != ns.podIno {
		t.Fatalf("Open = %d, %v; want /proc's %d", got, err, ns.podIno)
	}

	empty := Proc{Root: proc(t, map[string]procEntry{"1": {"0::/init.scope\n", ns.host}})}
	_, err = Fallback{First: cri, Second: empty}.Open(t.Context(), uid)
	if !errors.Is(err, ErrNotFound) || status.Code(err) != codes.Unavailable {
		t.Fatalf("both failing: %v; want /proc's ErrNotFound and the CRI's Unavailable", err)
	}
	if !strings.Contains(err.Error(), "cri: list sandboxes") || !strings.Contains(err.Error(), "no process in a cgroup") {
		t.Fatalf("both failing: %q lacks one of the reasons", err)
	}
}

func TestFallbackHostNetworkIsAnAnswer(t *testing.T) {
	second := &countingFinder{}
	_, err := Fallback{First: finderFunc(func(context.Context, string) (*Handle, error) {
		return nil, ErrHostNetwork
	}), Second: second}.Open(t.Context(), uid)
	if !errors.Is(err, ErrHostNetwork) || second.calls != 0 {
		t.Fatalf("Open = %v after %d fallback calls; want ErrHostNetwork and none", err, second.calls)
	}
}

// The fallback's Handle is the one Second opened, open; First's error is
// kept in the log, not in the answer.
func TestFallbackOpensSecond(t *testing.T) {
	second := &countingFinder{}
	h, err := Fallback{First: finderFunc(func(context.Context, string) (*Handle, error) {
		return nil, ErrNotFound
	}), Second: second}.Open(t.Context(), uid)
	if err != nil || second.calls != 1 {
		t.Fatalf("Open = %v, %v after %d fallback calls; want Second's Handle", h, err, second.calls)
	}
	defer h.Close()
	if want := inodeOf(t, "/proc/self/ns/net"); h.Inode() != want || fdInode(t, h) != want {
		t.Fatalf("Open holds %d (descriptor of %d), want %d", h.Inode(), fdInode(t, h), want)
	}
}

type finderFunc func(context.Context, string) (*Handle, error)

func (f finderFunc) Open(ctx context.Context, uid string) (*Handle, error) { return f(ctx, uid) }

// countingFinder opens our own network namespace, and counts the calls.
type countingFinder struct{ calls int }

func (c *countingFinder) Open(context.Context, string) (*Handle, error) {
	c.calls++
	return openNs("/proc/self/ns/net", true)
}

// A socket found under the host's root is dialled there and answers.
func TestFindCRISocketUnderHostRoot(t *testing.T) {
	root, err := os.MkdirTemp("", "host")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	// As on Debian and Ubuntu hosts: /var/run -> /run, an absolute link.
	if err := os.MkdirAll(filepath.Join(root, "run", "rt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root, "var", "run")); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(root, "run", "rt", "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()

	missing := "/nonexistent-" + filepath.Base(root) + "/cri.sock"
	got, ok := FindCRISocket(root, missing, "/var/run/rt/cri.sock")
	if want := filepath.Join(root, "run", "rt", "cri.sock"); !ok || got != want {
		t.Fatalf("FindCRISocket = %q, %v; want %q", got, ok, want)
	}
	// One mounted into the agent's own file system comes first.
	own := shortSocketPath(t)
	ownLis, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer ownLis.Close()
	if got, ok := FindCRISocket(root, own, "/var/run/rt/cri.sock"); !ok || got != own {
		t.Fatalf("FindCRISocket = %q, %v; want %q", got, ok, own)
	}
	if got, ok := FindCRISocket(root, missing); ok {
		t.Fatalf("FindCRISocket of nothing = %q", got)
	}
	// A regular file is no socket.
	plain := filepath.Join(root, "run", "rt", "plain.sock")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := FindCRISocket(root, "/run/rt/plain.sock"); ok {
		t.Fatalf("FindCRISocket of a plain file = %q", got)
	}
}

// The host's root as the agent sees it, /proc/1/root, works for dialling
// and for namespace paths: here /proc/self/root stands for it.
func TestCRIThroughProcRoot(t *testing.T) {
	ns := realNamespaces(t)
	nsDir := t.TempDir()
	plain := filepath.Join(nsDir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeRuntime{}
	f.add("sb1", uid, ready, 100, podNet, containerdInfo(t, uint32(ns.podPid), containerdNetns, false, true))
	f.add("sb2", "pod-2", ready, 100, podNet, crioInfo(t, 0, plain, true))
	sock := shortSocketPath(t)
	listenCRI(t, sock, f)
	viaProc, err := ResolveInRoot("/proc/self/root", sock)
	if err != nil || viaProc != "/proc/self/root"+sock {
		t.Fatalf("ResolveInRoot = %q, %v", viaProc, err)
	}
	c := CRI{Client: dialCRI(t, viaProc), HostRoot: "/proc/self/root", HostNetns: ns.host}
	if got, err := openedInode(t.Context(), c, uid); err != nil || got != ns.podIno {
		t.Fatalf("Open = %d, %v; want %d", got, err, ns.podIno)
	}
	// The CRI-O path is looked up under the host root: found, and refused
	// for what it is.
	if _, err := c.Open(t.Context(), "pod-2"); !errors.Is(err, ErrNotNetns) || !strings.Contains(err.Error(), "/proc/self/root"+plain) {
		t.Fatalf("Open of a plain file under the host root = %v, want ErrNotNetns naming it", err)
	}
}

// openedInode opens the pod's namespace with f and returns its inode,
// closing the handle.
func openedInode(ctx context.Context, f Finder, uid string) (uint32, error) {
	h, err := f.Open(ctx, uid)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	return h.Inode(), nil
}

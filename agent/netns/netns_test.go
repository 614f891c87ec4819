package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// proc writes a fake proc tree: pid → (cgroup file, target of the
// ns/net link: a real namespace file, or a path that does not exist).
func proc(t *testing.T, procs map[string]procEntry) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(p.cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p.netns, filepath.Join(dir, "ns", "net")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "meminfo"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

type procEntry = struct {
	cgroup string
	netns  string
}

const uid = "0b7c6e4a-1f2d-4c3b-9a8e-123456789abc"

func TestProcOpen(t *testing.T) {
	ns := realNamespaces(t)
	// A second pod namespace, where one can be made.
	other := ""
	if pid, ok := startInNewNetns(t); ok {
		other = fmt.Sprintf("/proc/%d/ns/net", pid)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host := procEntry{"0::/init.scope\n", ns.host}
	tests := []struct {
		name      string
		procs     map[string]procEntry
		needOther bool
		want      uint32
		wantErr   error
	}{
		{name: "cgroupfs v1", procs: map[string]procEntry{
			"1":   host,
			"200": {"12:memory:/kubepods/besteffort/pod" + uid + "/abc\n4:cpu:/kubepods/besteffort/pod" + uid + "/abc\n", ns.podPath},
			"300": {"0::/kubepods/podother/x\n", ns.host},
		}, want: ns.podIno},
		{name: "systemd v2", procs: map[string]procEntry{
			"1":   host,
			"201": {"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c6e4a_1f2d_4c3b_9a8e_123456789abc.slice/cri-containerd-1.scope\n", ns.podPath},
			"202": {"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c6e4a_1f2d_4c3b_9a8e_123456789abc.slice/cri-containerd-2.scope\n", ns.podPath},
		}, want: ns.podIno},
		{name: "a process exited while looked at", procs: map[string]procEntry{
			"1":   host,
			"209": {"0::/kubepods/pod" + uid + "/x\n", "/proc/self/ns/gone"},
			"210": {"0::/kubepods/pod" + uid + "/y\n", ns.podPath},
		}, want: ns.podIno},
		{name: "not running", procs: map[string]procEntry{"1": host}, wantErr: ErrNotFound},
		{name: "exited", procs: map[string]procEntry{
			"1":   host,
			"209": {"0::/kubepods/pod" + uid + "/x\n", "/proc/self/ns/gone"},
		}, wantErr: ErrNotFound},
		{name: "uid as a prefix of another is no match", procs: map[string]procEntry{
			"1":   host,
			"203": {"0::/kubepods/pod" + uid + "0/x\n", ns.podPath},
		}, wantErr: ErrNotFound},
		{name: "host network", procs: map[string]procEntry{
			"1":   {"0::/init.scope\n", ns.podPath},
			"204": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
		}, wantErr: ErrHostNetwork},
		// Fails on a main where an unreadable /proc/1/ns/net was taken as
		// "not the host's" (the real node's PID 1 is not readable by root).
		{name: "host namespace unreadable", procs: map[string]procEntry{
			"207": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
		}, wantErr: ErrHostUnknown},
		{name: "host namespace not a namespace", procs: map[string]procEntry{
			"1":   {"0::/init.scope\n", plain},
			"208": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
		}, wantErr: ErrHostUnknown},
		{name: "a process's namespace of another type", procs: map[string]procEntry{
			"1":   host,
			"211": {"0::/kubepods/pod" + uid + "/x\n", "/proc/self/ns/uts"},
		}, wantErr: ErrNotNetns},
		{name: "ambiguous", needOther: true, procs: map[string]procEntry{
			"1":   host,
			"205": {"0::/kubepods/pod" + uid + "/x\n", ns.podPath},
			"206": {"0::/kubepods/pod" + uid + "/y\n", other},
		}, wantErr: ErrAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needOther && other == "" {
				testenv.RequirePrivileged(t, "no second network namespace possible here")
			}
			checkOpen(t, Proc{Root: proc(t, tt.procs)}, tt.want, tt.wantErr)
		})
	}
}

func TestProcOpenRealProc(t *testing.T) {
	// The real /proc parses: our own netns link has the documented form.
	target, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if _, err := ParseNetnsLink(target); err != nil {
		t.Fatalf("ParseNetnsLink(%q): %v", target, err)
	}
	if _, err := (Proc{Root: "/proc"}).Open(t.Context(), uid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of an absent pod = %v, want ErrNotFound", err)
	}
}

func TestProcOpenBadUID(t *testing.T) {
	for _, bad := range []string{"", "../x", "a\nb"} {
		if h, err := (Proc{Root: t.TempDir()}).Open(t.Context(), bad); !errors.Is(err, ErrNotFound) || h != nil {
			t.Errorf("Open(%q) = %v, %v; want ErrNotFound", bad, h, err)
		}
	}
}

func TestParseNetnsLink(t *testing.T) {
	tests := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"net:[4026531840]", 4026531840, true},
		{"net:[1]", 1, true},
		{"net:[0]", 0, false},
		{"mnt:[4026531840]", 0, false},
		{"net:[4026531840", 0, false},
		{"net:[99999999999]", 0, false},
		{"net:[-1]", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseNetnsLink(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseNetnsLink(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseNetnsLink(f *testing.F) {
	for _, s := range []string{"net:[4026531840]", "net:[]", "net:[0x10]", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ino, err := ParseNetnsLink(s)
		if err == nil && ino == 0 {
			t.Fatal("zero inode accepted")
		}
	})
}

func FuzzCgroupNamesPod(f *testing.F) {
	f.Add("0::/kubepods/pod" + uid + "/x\n")
	f.Add("1:name=systemd:/\n::\n")
	f.Fuzz(func(t *testing.T, cg string) {
		_ = cgroupNamesPod(cg, []string{"pod" + uid})
	})
}

package netns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// proc writes a fake proc tree: pid → (cgroup file, netns inode).
func proc(t *testing.T, procs map[string]struct {
	cgroup string
	netns  string
}) string {
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

func TestProcNetns(t *testing.T) {
	host := procEntry{"0::/init.scope\n", "net:[4026531840]"}
	tests := []struct {
		name    string
		procs   map[string]procEntry
		want    uint32
		wantErr error
	}{
		{"cgroupfs v1", map[string]procEntry{
			"1":   host,
			"200": {"12:memory:/kubepods/besteffort/pod" + uid + "/abc\n4:cpu:/kubepods/besteffort/pod" + uid + "/abc\n", "net:[4026532500]"},
			"300": {"0::/kubepods/podother/x\n", "net:[4026532600]"},
		}, 4026532500, nil},
		{"systemd v2", map[string]procEntry{
			"1":   host,
			"201": {"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c6e4a_1f2d_4c3b_9a8e_123456789abc.slice/cri-containerd-1.scope\n", "net:[4026532501]"},
			"202": {"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c6e4a_1f2d_4c3b_9a8e_123456789abc.slice/cri-containerd-2.scope\n", "net:[4026532501]"},
		}, 4026532501, nil},
		{"not running", map[string]procEntry{"1": host}, 0, ErrNotFound},
		{"uid as a prefix of another is no match", map[string]procEntry{
			"1":   host,
			"203": {"0::/kubepods/pod" + uid + "0/x\n", "net:[4026532502]"},
		}, 0, ErrNotFound},
		{"host network", map[string]procEntry{
			"1":   host,
			"204": {"0::/kubepods/pod" + uid + "/x\n", "net:[4026531840]"},
		}, 0, ErrHostNetwork},
		// Fails on a main where an unreadable /proc/1/ns/net was taken as
		// "not the host's" (the real node's PID 1 is not readable by root).
		{"host namespace unreadable", map[string]procEntry{
			"207": {"0::/kubepods/pod" + uid + "/x\n", "net:[4026532505]"},
		}, 0, ErrHostUnknown},
		{"host namespace link malformed", map[string]procEntry{
			"1":   {"0::/init.scope\n", "mnt:[4026531841]"},
			"208": {"0::/kubepods/pod" + uid + "/x\n", "net:[4026532506]"},
		}, 0, ErrHostUnknown},
		{"ambiguous", map[string]procEntry{
			"1":   host,
			"205": {"0::/kubepods/pod" + uid + "/x\n", "net:[4026532503]"},
			"206": {"0::/kubepods/pod" + uid + "/y\n", "net:[4026532504]"},
		}, 0, ErrAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Proc{Root: proc(t, tt.procs)}.Netns(t.Context(), uid)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("Netns = %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProcNetnsRealProc(t *testing.T) {
	// The real /proc parses: our own netns link has the documented form.
	target, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if _, err := ParseNetnsLink(target); err != nil {
		t.Fatalf("ParseNetnsLink(%q): %v", target, err)
	}
	if _, err := (Proc{Root: "/proc"}).Netns(t.Context(), uid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Netns of an absent pod = %v, want ErrNotFound", err)
	}
}

func TestProcNetnsBadUID(t *testing.T) {
	for _, bad := range []string{"", "../x", "a\nb"} {
		if _, err := (Proc{Root: t.TempDir()}).Netns(t.Context(), bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("Netns(%q) = %v, want ErrNotFound", bad, err)
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

package netns

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestNsInode(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	self := inodeOf(t, "/proc/self/ns/net")
	tests := []struct {
		path    string
		wantNet bool
		want    uint32
		wantErr error
	}{
		{"/proc/self/ns/net", true, self, nil},
		{"/proc/self/ns/uts", false, inodeOf(t, "/proc/self/ns/uts"), nil},
		{"/proc/self/ns/uts", true, 0, ErrNotNetns},
		{plain, false, 0, ErrNotNetns},
		{"/dev/null", false, 0, ErrNotNetns},
		{"/proc/self", false, 0, ErrNotNetns},
		{plain + "-gone", true, 0, fs.ErrNotExist},
	}
	for _, tt := range tests {
		got, err := nsInode(tt.path, tt.wantNet)
		if got != tt.want || (tt.wantErr == nil) != (err == nil) || !errors.Is(err, tt.wantErr) {
			t.Errorf("nsInode(%s, %v) = %d, %v; want %d, %v", tt.path, tt.wantNet, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("run/netns")
	mk("var/lib")
	link("/run", "var/run")             // Debian, Ubuntu
	link("../../run", "var/lib/run")    // relative
	link("../../../../../../run", "up") // climbs above the root: stays in it
	link("/loop/a", "loop")             // a loop
	if err := os.WriteFile(filepath.Join(root, "run/netns/cni-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "run/netns/cni-1")
	for _, p := range []string{"/var/run/netns/cni-1", "/run/netns/cni-1", "/var/lib/run/netns/cni-1", "/up/netns/cni-1", "/../../run/./netns/cni-1"} {
		if got, err := resolveInRoot(root, p); err != nil || got != want {
			t.Errorf("resolveInRoot(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if _, err := resolveInRoot(root, "/var/run/netns/gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("resolveInRoot of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := resolveInRoot(root, "/loop/x"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("resolveInRoot of a loop = %v, want ELOOP", err)
	}
	for _, r := range []string{"", "/"} {
		if got, err := resolveInRoot(r, "/var/run/x"); err != nil || got != "/var/run/x" {
			t.Errorf("resolveInRoot(%q) = %q, %v; want the path as it is", r, got, err)
		}
	}
}

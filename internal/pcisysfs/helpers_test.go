package pcisysfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// writeTree writes a mock node under a fresh temporary directory.
func writeTree(tb testing.TB, spec mocksysfs.Spec) *mocksysfs.Truth {
	tb.Helper()
	truth, err := mocksysfs.Write(filepath.Join(tb.TempDir(), "node"), spec)
	if err != nil {
		tb.Fatalf("mocksysfs.Write: %v", err)
	}
	return truth
}

// loadMapFS copies the tree at dir into a MapFS (mocksysfs.LoadMapFS).
func loadMapFS(tb testing.TB, dir string) fstest.MapFS {
	tb.Helper()
	m, err := mocksysfs.LoadMapFS(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// noLinkFS hides ReadLink, as a file system that cannot read links does;
// Open still resolves links.
type noLinkFS struct{ fs fs.FS }

func (f noLinkFS) Open(name string) (fs.File, error) { return f.fs.Open(name) }

// hideFS makes every path under one of its prefixes not exist.
type hideFS struct {
	fs     fs.FS
	hidden []string
}

func (f hideFS) hides(name string) bool {
	for _, h := range f.hidden {
		if name == h || strings.HasPrefix(name, h+"/") {
			return true
		}
	}
	return false
}

func (f hideFS) Open(name string) (fs.File, error) {
	if f.hides(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return f.fs.Open(name)
}

func (f hideFS) ReadLink(name string) (string, error) {
	if f.hides(name) {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadLink(f.fs, name)
}

func (f hideFS) Lstat(name string) (fs.FileInfo, error) {
	if f.hides(name) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Lstat(f.fs, name)
}

// problemPaths returns the Path of every *AttrError in errs; anything else
// fails the test.
func problemPaths(t *testing.T, errs []error) []string {
	t.Helper()
	var paths []string
	for _, err := range errs {
		var ae *AttrError
		if !errors.As(err, &ae) {
			t.Errorf("problem %v is %T, not an *AttrError", err, err)
			continue
		}
		if ae.FS != SysFS {
			t.Errorf("problem %v names the tree %q, want %q", err, ae.FS, SysFS)
		}
		paths = append(paths, ae.Path)
	}
	return paths
}

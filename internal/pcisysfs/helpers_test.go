package pcisysfs

import (
	"errors"
	"path/filepath"
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

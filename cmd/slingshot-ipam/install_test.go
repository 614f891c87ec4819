package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// writeFile writes a test file and fails the test on error.
func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// The installed plugin in each starting state of the bin dir: what
// install leaves there, whether it reports a change, and the errors that
// name what is wrong.
func TestInstall(t *testing.T) {
	now := time.Now()
	bin := []byte("#!/bin/false\nnew plugin\n")
	for _, tc := range []struct {
		name string
		// setup prepares dir (the bin dir) beside src (this binary) and
		// returns the directory to install into.
		setup       func(t *testing.T, src, dir string) string
		wantChanged bool
		wantErr     string
		// keep is a file of dir that must still be there afterwards,
		// gone one that must have been removed.
		keep, gone string
	}{
		{name: "empty bin dir", setup: func(t *testing.T, src, dir string) string { return dir }, wantChanged: true},
		{name: "an older plugin", setup: func(t *testing.T, src, dir string) string {
			writeFile(t, filepath.Join(dir, installName), []byte("old plugin"), 0o755)
			return dir
		}, wantChanged: true},
		{name: "same bytes, not executable", setup: func(t *testing.T, src, dir string) string {
			writeFile(t, filepath.Join(dir, installName), bin, 0o644)
			return dir
		}, wantChanged: true},
		{name: "same bytes and mode", setup: func(t *testing.T, src, dir string) string {
			writeFile(t, filepath.Join(dir, installName), bin, 0o755)
			return dir
		}},
		{name: "a symlink to another file", setup: func(t *testing.T, src, dir string) string {
			other := filepath.Join(t.TempDir(), "other")
			writeFile(t, other, []byte("other"), 0o755)
			if err := os.Symlink(other, filepath.Join(dir, installName)); err != nil {
				t.Fatal(err)
			}
			return dir
		}, wantChanged: true},
		{name: "other plugins untouched", setup: func(t *testing.T, src, dir string) string {
			writeFile(t, filepath.Join(dir, "macvlan"), []byte("macvlan"), 0o755)
			return dir
		}, wantChanged: true, keep: "macvlan"},
		{name: "stale temp removed, recent kept", setup: func(t *testing.T, src, dir string) string {
			stale, recent := filepath.Join(dir, ".slingshot-ipam.tmp111"), filepath.Join(dir, ".slingshot-ipam.tmp222")
			writeFile(t, stale, []byte("half"), 0o600)
			writeFile(t, recent, []byte("half"), 0o600)
			if err := os.Chtimes(stale, now.Add(-2*staleTemp), now.Add(-2*staleTemp)); err != nil {
				t.Fatal(err)
			}
			return dir
		}, wantChanged: true, gone: ".slingshot-ipam.tmp111", keep: ".slingshot-ipam.tmp222"},
		{name: "the installed binary installing itself", setup: func(t *testing.T, src, dir string) string {
			return filepath.Dir(src)
		}},
		{name: "no such dir", setup: func(t *testing.T, src, dir string) string {
			return filepath.Join(dir, "missing")
		}, wantErr: "install directory: stat "},
		{name: "dir is a file", setup: func(t *testing.T, src, dir string) string {
			p := filepath.Join(dir, "file")
			writeFile(t, p, nil, 0o644)
			return p
		}, wantErr: "is not a directory"},
		{name: "plugin path is a directory", setup: func(t *testing.T, src, dir string) string {
			if err := os.Mkdir(filepath.Join(dir, installName), 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		}, wantErr: "is a directory, not a plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcDir, dir := t.TempDir(), t.TempDir()
			src := filepath.Join(srcDir, installName)
			writeFile(t, src, bin, 0o755)
			into := tc.setup(t, src, dir)
			dst, changed, err := install(src, into, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("install: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("install: %v", err)
			}
			if dst != filepath.Join(into, installName) || changed != tc.wantChanged {
				t.Errorf("install = %s, changed %v; want %s, changed %v", dst, changed, filepath.Join(into, installName), tc.wantChanged)
			}
			fi, err := os.Lstat(dst)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 || !bytes.Equal(got, bin) {
				t.Errorf("%s: mode %v, content %q; want a regular file of mode 0755 holding %q", dst, fi.Mode(), got, bin)
			}
			if tc.keep != "" {
				if _, err := os.Stat(filepath.Join(into, tc.keep)); err != nil {
					t.Errorf("%s should have been kept: %v", tc.keep, err)
				}
			}
			if tc.gone != "" {
				if _, err := os.Stat(filepath.Join(into, tc.gone)); err == nil {
					t.Errorf("%s should have been removed", tc.gone)
				}
			}
			// Nothing of this install is left behind, and a second one
			// changes nothing, not even the inode.
			entries, err := os.ReadDir(into)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "."+installName+".tmp") && e.Name() != tc.keep {
					t.Errorf("temporary file %s left in %s", e.Name(), into)
				}
			}
			ino := inode(t, dst)
			if _, changed, err := install(src, into, now); err != nil || changed {
				t.Errorf("second install: changed %v, %v; want nothing to do", changed, err)
			}
			if inode(t, dst) != ino {
				t.Errorf("second install replaced %s", dst)
			}
		})
	}
}

// A reader of the plugin while it is replaced again and again sees the
// old binary or the new one, whole, never a mix or a partial file.
func TestInstallAtomic(t *testing.T) {
	dir, srcDir := t.TempDir(), t.TempDir()
	a, b := bytes.Repeat([]byte{'a'}, 1<<20), bytes.Repeat([]byte{'b'}, 1<<20)
	srcA, srcB := filepath.Join(srcDir, "a"), filepath.Join(srcDir, "b")
	writeFile(t, srcA, a, 0o755)
	writeFile(t, srcB, b, 0o755)
	if _, _, err := install(srcA, dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, installName)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	reads := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Errorf("read %s: %v", dst, err)
				return
			}
			if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
				t.Errorf("read %d bytes of %s that are neither binary", len(got), dst)
				return
			}
			reads++
		}
	}()
	for i := range 50 {
		src := srcA
		if i%2 == 0 {
			src = srcB
		}
		if _, changed, err := install(src, dir, time.Now()); err != nil || !changed {
			t.Fatalf("install %d: changed %v, %v", i, changed, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads during 50 installs", reads)
}

// The command line of the install mode: usage, wrong arguments, and the
// messages of success and failure.
func TestRunInstall(t *testing.T) {
	src := filepath.Join(t.TempDir(), installName)
	writeFile(t, src, []byte("plugin"), 0o755)
	dir := t.TempDir()
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "help", args: []string{"--help"}, wantStdout: "slingshot-ipam install DIR"},
		{name: "short help", args: []string{"-h"}, wantStdout: "slingshot-ipam install DIR"},
		{name: "no dir", args: nil, wantCode: 2, wantStderr: "want one argument"},
		{name: "two dirs", args: []string{dir, dir}, wantCode: 2, wantStderr: "want one argument"},
		{name: "a flag", args: []string{"--force"}, wantCode: 2, wantStderr: `got ["--force"]`},
		{name: "empty dir", args: []string{""}, wantCode: 2, wantStderr: "want one argument"},
		{name: "missing dir", args: []string{filepath.Join(dir, "nope")}, wantCode: 1, wantStderr: filepath.Join(dir, "nope")},
		{name: "installs", args: []string{dir}, wantStdout: "installed " + filepath.Join(dir, installName)},
		{name: "again", args: []string{dir}, wantStdout: "already this binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runInstall(tc.args, src, time.Now(), &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stdout.String(), tc.wantStdout) || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("runInstall(%q) = %d, stdout %q, stderr %q; want %d, stdout with %q, stderr with %q",
					tc.args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

// The built binary installs itself, the installed copy runs as the
// plugin, and with CNI_COMMAND set "install" is no mode: the runtime's
// call is a CNI call.
func TestInstallBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), installName)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	out, err := exec.Command(bin, "install", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "installed "+filepath.Join(dir, installName)) {
		t.Fatalf("%s install %s: %v\n%s", bin, dir, err, out)
	}
	installed := filepath.Join(dir, installName)
	usage := exec.Command(installed)
	usage.Env = []string{"PATH=/usr/bin:/bin"}
	out, err = usage.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CNI IPAM plugin") || !strings.Contains(string(out), "slingshot-ipam install DIR") {
		t.Errorf("the installed plugin without CNI_COMMAND: %v\n%s", err, out)
	}
	version := exec.Command(installed, "install", t.TempDir())
	version.Env = []string{"CNI_COMMAND=VERSION"}
	version.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	out, err = version.Output()
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err != nil || json.Unmarshal(out, &v) != nil || len(v.SupportedVersions) == 0 {
		t.Errorf("CNI_COMMAND=VERSION with args install: %v, %s; want the plugin's version answer", err, out)
	}
	out, err = exec.Command(bin, "install").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "want one argument") {
		t.Errorf("install without a dir: exit %d\n%s", code, out)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
)

// installName is the file the plugin is installed as: a network
// configuration's "ipam": {"type": "slingshot-ipam"} names it.
const installName = "slingshot-ipam"

// installMode is the installed plugin's mode: runtimes execute it as root.
const installMode fs.FileMode = 0o755

// staleTemp is how old a temporary file of an earlier install must be
// before install removes it: one that old belongs to an install that
// crashed, not to one running beside this one.
const staleTemp = time.Hour

// installUsage is printed by `slingshot-ipam install --help`, on a wrong
// command line, and after the plugin's own usage.
const installUsage = `Install mode (only when CNI_COMMAND is unset):
  slingshot-ipam install DIR
  copies this binary into DIR/` + installName + ` (the node's CNI bin dir, e.g. /opt/cni/bin),
  atomically: a runtime executes the old plugin or the new one, never a partly written file.
  DIR must exist. Running it again with the same binary changes nothing.`

// runInstall runs `slingshot-ipam install ARGS` for the binary self and
// returns the exit status: 0 done, 1 failed, 2 a wrong command line.
func runInstall(args []string, self string, now time.Time, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, installUsage)
		return 0
	}
	if len(args) != 1 || args[0] == "" || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "slingshot-ipam install: want one argument, the directory to install into; got %q\n%s\n", args, installUsage)
		return 2
	}
	dst, changed, err := install(self, args[0], now)
	if err != nil {
		fmt.Fprintln(stderr, "slingshot-ipam install:", err)
		return 1
	}
	if changed {
		fmt.Fprintln(stdout, "slingshot-ipam: installed", dst)
	} else {
		fmt.Fprintln(stdout, "slingshot-ipam:", dst, "is already this binary; left as it is")
	}
	return 0
}

// install copies the executable src into dir as installName and returns
// its path and whether it changed anything. The copy is written to a
// temporary file in dir, synced, made executable and renamed over the
// old plugin, then dir is synced (atomicfile.WriteFile): a runtime that
// executes the plugin meanwhile runs the old binary or the new, and a
// plugin being executed is replaced without ETXTBSY. A plugin that is
// already a copy of src (same bytes, mode 0755), or src itself, is left
// alone. Temporary files of earlier installs older than staleTemp are
// removed, as far as they can be.
func install(src, dir string, now time.Time) (dst string, changed bool, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", false, fmt.Errorf("install directory: %w", err)
	}
	if !fi.IsDir() {
		return "", false, fmt.Errorf("install directory %s is not a directory", dir)
	}
	dst = filepath.Join(dir, installName)
	srcInfo, err := os.Stat(src)
	if err != nil {
		return "", false, fmt.Errorf("this binary: %w", err)
	}
	if !srcInfo.Mode().IsRegular() {
		return "", false, fmt.Errorf("this binary %s is not a regular file", src)
	}
	removeStaleTemps(dir, now)
	if dstInfo, err := os.Stat(dst); err == nil && os.SameFile(srcInfo, dstInfo) {
		return dst, false, nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", false, fmt.Errorf("read this binary: %w", err)
	}
	if same, err := installedAs(dst, data); err != nil {
		return "", false, err
	} else if same {
		return dst, false, nil
	}
	if err := atomicfile.WriteFile(dst, data, installMode); err != nil {
		return "", false, fmt.Errorf("install %s: %w", dst, err)
	}
	return dst, true, nil
}

// installedAs reports whether dst is a regular file of mode installMode
// holding exactly data. A missing dst is not an error.
func installedAs(dst string, data []byte) (bool, error) {
	fi, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("installed plugin: %w", err)
	}
	if fi.IsDir() {
		return false, fmt.Errorf("%s is a directory, not a plugin: remove it first", dst)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != installMode || fi.Size() != int64(len(data)) {
		return false, nil
	}
	old, err := os.ReadFile(dst)
	if err != nil {
		return false, fmt.Errorf("read the installed plugin: %w", err)
	}
	return bytes.Equal(old, data), nil
}

// removeStaleTemps removes the temporary files atomicfile left in dir
// when an earlier install died before its rename, if older than
// staleTemp. Failures are ignored: a leftover file is harmless, since no
// network configuration names it.
func removeStaleTemps(dir string, now time.Time) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "."+installName+".tmp") {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

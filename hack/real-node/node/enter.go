package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rootEnv carries the node's root into the namespaces; its presence marks
// the program's second run, inside them.
const rootEnv = "SLINGSHOT_REAL_NODE_ROOT"

// Inside reports whether the program runs as the node's init, inside the
// namespaces [Enter] made, and the node's root directory if so. The init
// of a cluster node's namespaces (IsWorker) is not.
func Inside() (root string, ok bool) {
	root = os.Getenv(rootEnv)
	return root, root != "" && os.Getpid() == 1 && !IsWorker()
}

// Enter runs this program again, with the same arguments, as PID 1 of new
// PID, mount and network namespaces (util-linux unshare), with a new
// temporary root directory under tmpBase ("" for the system's). Why: the
// CI machine's own PID 1 cannot be read, even by root, so /proc/1 must be
// the node's own init; and every mount, network namespace, bridge and
// route the node makes then ends with it instead of lingering on the
// host. prepare, when not nil, runs first, outside the namespaces, where
// the network is (the node's network namespace has none): builds go there.
// When the program ends, Enter removes the root, but for its logs/ when
// the run failed, and returns the program's exit status.
func Enter(tmpBase string, prepare func(root string) error) (int, error) {
	root, err := os.MkdirTemp(tmpBase, "real-node-")
	if err != nil {
		return 1, err
	}
	if prepare != nil {
		if err := prepare(root); err != nil {
			os.RemoveAll(root)
			return 1, err
		}
	}
	args := append([]string{"--pid", "--fork", "--mount-proc", "--mount", "--net", "--propagation", "private", "--kill-child", "--"}, os.Args...)
	cmd := exec.Command("unshare", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), rootEnv+"="+root)
	// Ctrl-C reaches the whole foreground process group, the node's init
	// among them, which stops in order; this process must outlive it to
	// clean up. SIGTERM is passed on to the init.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(root)
		return 1, fmt.Errorf("unshare (util-linux): %w", err)
	}
	recordInitPID(root, cmd.Process.Pid)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	for done := false; !done; {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM {
				signalChildren(cmd.Process.Pid, syscall.SIGTERM)
			}
		case werr = <-waited:
			done = true
		}
	}
	code := 0
	if werr != nil {
		code = 1
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
	}
	if err := cleanRoot(root, code == 0); err != nil {
		return max(code, 1), err
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "real node: failed; its logs are kept in %s\n", filepath.Join(root, "logs"))
	}
	return code, nil
}

// cleanRoot removes the node's root, or all of it but logs/ when all is
// false. The namespaces have ended, so nothing is mounted there; a
// removal that still fails is retried a few times, as the kernel may be
// releasing the last mounts.
func cleanRoot(root string, all bool) error {
	var err error
	for range 5 {
		if all {
			err = os.RemoveAll(root)
		} else {
			err = removeAllBut(root, "logs")
		}
		if err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("remove the node's root: %w", err)
}

func removeAllBut(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() != keep {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// signalChildren sends sig to the children of pid (unshare's forked
// child, the node's init), since unshare itself ignores it.
func signalChildren(pid int, sig syscall.Signal) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(c, sig)
		}
	}
}

// initPIDFile holds the host's PID of the node's init, for nsenter.
const initPIDFile = "init.pid"

// recordInitPID writes the host PID of unshare's child, the node's init,
// into the root; the init itself only knows itself as PID 1.
func recordInitPID(root string, unsharePID int) {
	for range 50 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unsharePID, unsharePID))
		if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
			_ = os.WriteFile(filepath.Join(root, initPIDFile), []byte(f[0]), 0o644)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HostPID returns the host's PID of the node's init, as Enter recorded it
// in root, or 0 when unknown.
func HostPID(root string) int {
	b, err := os.ReadFile(filepath.Join(root, initPIDFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

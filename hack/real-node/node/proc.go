package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one long-running program of the node (etcd, containerd, the
// kubelet, ...). It can be stopped with a chosen signal and started again
// with the same arguments, which is how tests restart a component.
// Its methods are safe for concurrent use.
type Proc struct {
	Name string
	Path string
	Args []string
	Env  []string
	// Log is the file stdout and stderr go to; each start appends.
	Log string
	// Cloneflags are the namespaces the program gets of its own
	// (CLONE_NEWPID, ...), as in syscall.SysProcAttr; 0: this process's.
	Cloneflags uintptr
	// ExtraFiles are passed to the program as descriptors 3 and up.
	ExtraFiles []*os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's answer, once done is closed
}

// Start starts the program; it is an error to start a running one.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.Name, err)
	}
	fmt.Fprintf(f, "==== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), p.Env...)
	// Its own process group, so that a signal meant for the test's
	// process group (Ctrl-C in demo-node) reaches the node's init alone,
	// which stops the components in order. No Pdeathsig: it fires when the
	// starting OS thread ends, not the process; the node's init ending ends
	// every process of its PID namespace anyway.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: p.Cloneflags}
	cmd.ExtraFiles = p.ExtraFiles
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Pid is the running program's process ID in this process's PID
// namespace, 0 when it does not run.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Err says why a stopped program ended; nil while it runs.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || !isClosed(p.done) {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited with status 0", p.Name)
	}
	return fmt.Errorf("%s: %w", p.Name, p.err)
}

// Stop sends sig and waits for the exit; after grace it sends SIGKILL.
// Stopping a program that does not run does nothing.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// Tail returns the last n lines of the program's log.
func (p *Proc) Tail(n int) string { return TailFile(p.Log, n) }

// TailFile returns the last n lines of the file at path, or why it could
// not be read.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log %s: %v)", filepath.Base(path), err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

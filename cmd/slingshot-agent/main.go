// Command slingshot-agent is the Slingshot node agent (run it as a
// DaemonSet): it serves the node's Slingshot NICs to the kubelet and
// programs a CXI service per pod before the pod's code runs.
//
//	slingshot-agent [flags]                  run the agent
//	slingshot-agent --version                print the version and exit
//	slingshot-agent inspect [--json] [--addr] print a running agent's state
//
// Every flag is also read from SLINGSHOT_AGENT_<FLAG>; --help lists them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/agent"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/internal/flagenv"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// init keeps the main goroutine on the main thread, so that no other
// goroutine ever runs there. The agent switches threads into pods'
// network namespaces (package hsnlink) on goroutines locked to their
// threads and never unlocked, so that the runtime ends each thread with
// its goroutine; but the runtime cannot end the main thread, and wedges
// it instead, in the pod's namespace for good: the namespace would stay
// alive (an inode the pod's CXI services still name) and
// /proc/<pid>/ns/net would show the agent inside a pod.
func init() { runtime.LockOSThread() }

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "slingshot-agent: %v\n", err)
		}
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// usageError marks bad flags, for exit code 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "inspect" {
		return runInspect(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("slingshot-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := agent.Options{Controller: defaultController}
	opts.RegisterFlags(fs)
	showVersion := fs.Bool(flagenv.VersionFlag, false, "print the version, commit, build date and Go version, and exit")
	fs.Usage = flagenv.Usage(fs, agent.EnvPrefix, `usage: slingshot-agent [flags]
       slingshot-agent --version
       slingshot-agent inspect [--json] [--addr URL]

The Slingshot node agent: serves the node's Slingshot NICs to the kubelet as a
device-plugin resource and programs a CXI service per pod (the pod's network
namespace as member, the job's VNI) before the pod's code runs.`)
	if err := fs.Parse(args); err != nil {
		return usageFlagErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	// Before the environment and validation: the version needs neither,
	// and asking for it must work where the other flags would not.
	if *showVersion {
		_, err := fmt.Fprint(stdout, version.Get().String("slingshot-agent"))
		return err
	}
	if err := flagenv.Apply(fs, agent.EnvPrefix, os.LookupEnv); err != nil {
		return usageError{err}
	}
	if err := opts.Complete(os.LookupEnv, os.Hostname); err != nil {
		return usageError{err}
	}
	if err := opts.Validate(); err != nil {
		return usageError{err}
	}
	opts.EmbeddedController = embeddedController
	if opts.Controller == "embedded" && opts.EmbeddedController == nil {
		return usageError{agent.ErrNoEmbeddedController}
	}
	logger, err := newLogger(stderr, opts.LogLevel, opts.LogFormat)
	if err != nil {
		return usageError{err}
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return agent.Run(ctx, opts, logger)
}

// gcPercent is the agent's GOGC unless the environment sets one. Its live
// heap is small and its allocation rate low (a few KiB per pod): a heap
// goal of 1.5 times the live heap rather than twice keeps its anonymous
// memory under 16 MiB while pods come and go (make bench-memory), for a
// collection more often, which costs it little.
const gcPercent = 50

func usageFlagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slingshot-agent inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:9479", "the running agent's HTTP `endpoint` on this host: its --inspect-addr, or its --metrics-addr when that is a loopback address (/inspect is answered on loopback only)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this `duration`")
	fs.Usage = flagenv.Usage(fs, agent.EnvPrefix+"INSPECT_", "usage: slingshot-agent inspect [--json] [--addr URL]\n\nPrints the running agent's NICs, CXI services, pods and leases.")
	if err := fs.Parse(args); err != nil {
		return usageFlagErr(err)
	}
	if err := flagenv.Apply(fs, agent.EnvPrefix+"INSPECT_", os.LookupEnv); err != nil {
		return usageError{err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r, err := inspect.Fetch(ctx, *addr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return inspect.WriteTable(stdout, r)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

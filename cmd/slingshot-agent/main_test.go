package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/version"
)

func TestHelpListsEveryFlagWithItsEnv(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--help"}, &out, &out)
	if !errors.Is(err, flag.ErrHelp) || exitCode(err) != 0 {
		t.Fatalf("--help: %v (exit %d)", err, exitCode(err))
	}
	for _, want := range []string{
		"--kubelet-dir", "SLINGSHOT_AGENT_KUBELET_DIR", "--sysfs-root", "--dev-root", "--state-dir",
		"--controller", "--cxi-driver", "--config", "--node-name", "--metrics-addr", "inspect",
		"--cri-socket", "SLINGSHOT_AGENT_CRI_SOCKET", "--version",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"--cxi-driver", "magic", "--node-name", "n"},
		{"--kubelet-dir", "relative", "--node-name", "n"},
		{"--cri-socket", "containerd.sock", "--node-name", "n"},
		{"--controller", "nohostport", "--node-name", "n"},
		{"--no-such-flag"},
		{"--node-name", "n", "extra"},
	} {
		var out bytes.Buffer
		err := run(args, &out, &out)
		if err == nil || exitCode(err) != 2 {
			t.Errorf("%v: err %v, exit %d; want a usage error", args, err, exitCode(err))
		}
	}
}

func TestInspectUnreachable(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"inspect", "--addr", "http://127.0.0.1:1", "--timeout", "2s"}, &out, &out)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("inspect of nothing: %v (exit %d)", err, exitCode(err))
	}
}

// --version prints the build and nothing else, whatever the other flags
// say: it must answer on a host where the agent could not start.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{
		{"--version"},
		{"--cxi-driver", "magic", "--version"},
		{"--log-level", "debug", "--version"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(args, &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if want := "slingshot-agent " + version.Version + "\n"; !strings.HasPrefix(stdout.String(), want) {
			t.Errorf("%v printed %q, want it to start %q", args, stdout.String(), want)
		}
		if stdout.String() != version.Get().String("slingshot-agent") {
			t.Errorf("%v printed %q, want %q", args, stdout.String(), version.Get().String("slingshot-agent"))
		}
		if stderr.Len() > 0 {
			t.Errorf("%v wrote to stderr: %q", args, stderr.String())
		}
	}
}

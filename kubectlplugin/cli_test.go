package kubectlplugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/version"
)

// errConnected stops a command right after its flags were parsed.
var errConnected = errors.New("connected")

func TestRunArguments(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantErr   error
		wantOpts  Options // checked when connected
		wantHelp  string  // a line the help on stdout holds
		errSubstr string
	}{
		{name: "global flags before the command, the pod's after its name", args: []string{"--context", "prod", "-n", "team-a", "pod", "allreduce-0", "-o", "json", "--kubeconfig=/k"},
			wantErr: errConnected, wantOpts: Options{Kubeconfig: "/k", Context: "prod", Namespace: "team-a", Output: "json"}},
		{name: "defaults", args: []string{"vnis"}, wantErr: errConnected, wantOpts: Options{}},
		{name: "nodes with a namespace of the agents", args: []string{"nodes", "--slingshot-namespace", "hpc", "--parallel", "2"},
			wantErr: errConnected, wantOpts: Options{SlingshotNamespace: "hpc", Parallel: 2}},
		{name: "root help", args: []string{"--help"}, wantHelp: "kubectl slingshot pod NAME [-n NAMESPACE] [-o json]"},
		{name: "command help", args: []string{"pod", "-h"}, wantHelp: "Needs: get pods in the pod's namespace"},
		{name: "vnis help names its RBAC", args: []string{"vnis", "--help"}, wantHelp: "list vnileases, vniquarantines and storejournals"},
		{name: "version", args: []string{"--version"}, wantHelp: "kubectl-slingshot " + version.Version + "\ncommit:"},
		{name: "version beside a command", args: []string{"--version", "nodes"}, wantHelp: "kubectl-slingshot " + version.Version + "\n"},
		{name: "version is the plugin's own, not a command's flag", args: []string{"nodes", "--version"}, wantErr: ErrUsage, errSubstr: "unknown flag: --version"},
		{name: "no command", args: nil, wantErr: ErrUsage, errSubstr: "no command"},
		{name: "unknown command", args: []string{"leases"}, wantErr: ErrUsage, errSubstr: `unknown command "leases"`},
		{name: "pod without a name", args: []string{"pod"}, wantErr: ErrUsage, errSubstr: "one pod name"},
		{name: "pod with two names", args: []string{"pod", "a", "b"}, wantErr: ErrUsage, errSubstr: "one pod name"},
		{name: "vnis with an argument", args: []string{"vnis", "x"}, wantErr: ErrUsage, errSubstr: "takes no arguments"},
		{name: "yaml output", args: []string{"vnis", "-o", "yaml"}, wantErr: ErrUsage, errSubstr: "only json"},
		{name: "unknown flag", args: []string{"nodes", "--all"}, wantErr: ErrUsage, errSubstr: "unknown flag: --all"},
		{name: "no parallelism", args: []string{"nodes", "--parallel", "0"}, wantErr: ErrUsage, errSubstr: "--parallel 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			var got *Options
			c := &Command{Stdout: &stdout, Stderr: &stderr, Now: time.Now, Connect: func(o *Options) (*Cluster, string, error) {
				got = o
				return nil, "", errConnected
			}}
			err := c.Run(t.Context(), tt.args)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run(%q) = %v, want %v", tt.args, err, tt.wantErr)
			}
			if tt.errSubstr != "" && !strings.Contains(err.Error(), tt.errSubstr) {
				t.Errorf("Run(%q) = %v, want it to say %q", tt.args, err, tt.errSubstr)
			}
			if tt.wantHelp != "" && !strings.Contains(stdout.String(), tt.wantHelp) {
				t.Errorf("Run(%q) printed %q, want help holding %q", tt.args, stdout.String(), tt.wantHelp)
			}
			if stderr.Len() > 0 {
				t.Errorf("Run(%q) wrote to stderr: %q (errors are returned, help goes to stdout)", tt.args, stderr.String())
			}
			if tt.wantErr != errConnected {
				if got != nil {
					t.Errorf("Run(%q) connected; it should have stopped at its arguments", tt.args)
				}
				return
			}
			want := tt.wantOpts
			want.AgentSelector = DefaultAgentSelector
			want.Timeout = time.Minute
			if want.Parallel == 0 {
				want.Parallel = 8
			}
			if *got != want {
				t.Errorf("Run(%q) options = %+v, want %+v", tt.args, *got, want)
			}
		})
	}
}

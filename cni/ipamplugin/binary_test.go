package ipamplugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// buildPlugin builds cmd/slingshot-ipam into a temporary directory, as
// `make build` builds it (with ldflags added to its "-s -w"), and returns
// that directory.
func buildPlugin(t testing.TB, ldflags ...string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.Join(append([]string{"-s -w"}, ldflags...), " "),
		"-o", filepath.Join(dir, "slingshot-ipam"), "github.com/slingshot-k8s/slingshot/cmd/slingshot-ipam")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build slingshot-ipam: %v\n%s", err, out)
	}
	return dir
}

// The binary, driven as a runtime drives it, through skel: usage without
// CNI_COMMAND, the verbs of each version, and what an older version does
// not have.
func TestBinary(t *testing.T) {
	dir := buildPlugin(t)
	bin := filepath.Join(dir, "slingshot-ipam")
	for _, args := range [][]string{nil, {"--help"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s %v: %v", bin, args, err)
		}
		for _, want := range []string{About, "CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%s %v printed %q, want it to say %q", bin, args, stderr.String(), want)
			}
		}
	}

	a := newFakeAgent(t)
	ctx := context.Background()
	// The IPAM plugin never opens the namespace; skel only checks that it
	// is not the plugin's own, which a path to nothing is not.
	netns := filepath.Join(dir, "no-netns")
	args := func(verb, id string) *invoke.Args {
		return &invoke.Args{Command: verb, ContainerID: id, NetNS: netns, IfName: "net1", Path: dir,
			PluginArgsStr: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
	}
	r, err := invoke.ExecPluginWithResult(ctx, bin, netConfig("0.4.0", a.socket), args("ADD", "c1"), nil)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if r.Version() != "0.4.0" || !strings.Contains(resultString(t, r), "10.150.0.1/16") {
		t.Errorf("ADD gave %s, want 10.150.0.1/16 as cniVersion 0.4.0", resultString(t, r))
	}
	if a.adds[0].Pod.Name != "p" || a.adds[0].Netns != netns {
		t.Errorf("the agent was asked %+v, want pod ns/p in %s", a.adds[0], netns)
	}
	if err := invoke.ExecPluginWithoutResult(ctx, bin, netConfig("1.1.0", a.socket), args("STATUS", ""), nil); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	gc := netConfig("1.1.0", a.socket, `"cni.dev/valid-attachments":[]`)
	if err := invoke.ExecPluginWithoutResult(ctx, bin, gc, args("GC", ""), nil); err != nil {
		t.Errorf("GC: %v", err)
	}
	if _, ok := a.held(ipamwire.Attachment{ContainerID: "c1", IfName: "net1"}); ok {
		t.Errorf("GC with no valid attachment left c1's address")
	}
	err = invoke.ExecPluginWithoutResult(ctx, bin, netConfig("1.0.0", a.socket), args("STATUS", ""), nil)
	wantCode(t, err, types.ErrIncompatibleCNIVersion)
	err = invoke.ExecPluginWithoutResult(ctx, bin, netConfig("0.2.0", a.socket), args("DEL", "c1"), nil)
	wantCode(t, err, types.ErrIncompatibleCNIVersion)
	down := filepath.Join(t.TempDir(), "none.sock")
	_, err = invoke.ExecPluginWithResult(ctx, bin, netConfig("1.0.0", down), args("ADD", "c2"), nil)
	wantCode(t, err, ipamwire.CodeTryAgainLater)
}

func resultString(t *testing.T, r types.Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.PrintTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func wantCode(t *testing.T, err error, code uint) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Errorf("error %v, want a CNI error of code %d", err, code)
	}
}

// The binary against the agent's real allocator, the verbs that need no
// namespace: GC keeps only the valid attachments, STATUS answers for the
// pool, CHECK compares with prevResult, DEL of the unknown succeeds.
func TestBinaryRealAgent(t *testing.T) {
	a, dir := startAgent(t), buildPlugin(t)
	bin, ctx := filepath.Join(dir, "slingshot-ipam"), context.Background()
	args := func(verb, id string) *invoke.Args {
		return &invoke.Args{Command: verb, ContainerID: id, NetNS: filepath.Join(dir, "no-netns"), IfName: "net1", Path: dir}
	}
	results := map[string]string{}
	for _, id := range []string{"c1", "c2", "c3"} {
		r, err := invoke.ExecPluginWithResult(ctx, bin, netConfig("1.1.0", a.socket), args("ADD", id), nil)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		results[id] = resultString(t, r)
	}
	prev := func(id string) []byte { return netConfig("1.1.0", a.socket, `"prevResult":`+results[id]) }
	if err := invoke.ExecPluginWithoutResult(ctx, bin, prev("c1"), args("CHECK", "c1"), nil); err != nil {
		t.Errorf("CHECK c1: %v", err)
	}
	err := invoke.ExecPluginWithoutResult(ctx, bin, prev("c2"), args("CHECK", "c1"), nil)
	wantCode(t, err, ipamwire.CodeInvalidRequest)
	gc := netConfig("1.1.0", a.socket, `"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"net1"}]`)
	if err := invoke.ExecPluginWithoutResult(ctx, bin, gc, args("GC", ""), nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := a.owners(); len(got) != 1 || got[0] != "cni/c2/net1" {
		t.Errorf("after GC the allocator holds %v, want only cni/c2/net1", got)
	}
	if err := invoke.ExecPluginWithoutResult(ctx, bin, netConfig("1.1.0", a.socket), args("STATUS", ""), nil); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	other := bytes.Replace(netConfig("1.1.0", a.socket), []byte(`"pool":"hsn0"`), []byte(`"pool":"hsn9"`), 1)
	wantCode(t, invoke.ExecPluginWithoutResult(ctx, bin, other, args("STATUS", ""), nil), ipamwire.CodeNotAvailable)
	for _, id := range []string{"c2", "never-added"} {
		if err := invoke.ExecPluginWithoutResult(ctx, bin, netConfig("1.1.0", a.socket), args("DEL", id), nil); err != nil {
			t.Errorf("DEL %s: %v", id, err)
		}
	}
	if got := a.owners(); len(got) != 0 {
		t.Errorf("after DEL the allocator holds %v", got)
	}
}

// --version prints the build the Makefile's -ldflags name, and does not
// get in the way of CNI's own VERSION command, which a runtime sends in
// the environment and answers on stdout as JSON.
func TestBinaryVersion(t *testing.T) {
	const pkg = "github.com/slingshot-k8s/slingshot/internal/version"
	bin := filepath.Join(buildPlugin(t, "-X", pkg+".Commit=0123abc", "-X", pkg+".BuildDate=2026-01-02T03:04:05Z"), "slingshot-ipam")
	tests := []struct {
		name  string
		args  []string
		env   []string
		stdin string
		want  []string // on stdout
	}{
		{name: "--version", args: []string{"--version"},
			want: []string{"slingshot-ipam " + version.Version + "\n", "commit:     0123abc\n", "build date: 2026-01-02T03:04:05Z\n"}},
		{name: "CNI's VERSION", env: []string{"CNI_COMMAND=VERSION"}, stdin: `{"cniVersion":"1.0.0"}`,
			want: []string{`"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`}},
		{name: "CNI's VERSION with --version in the arguments", args: []string{"--version"}, env: []string{"CNI_COMMAND=VERSION"},
			stdin: `{"cniVersion":"1.0.0"}`, want: []string{`"supportedVersions":`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tt.env...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %v\n%s", tt.args, err, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout %q lacks %q", stdout.String(), w)
				}
			}
		})
	}
}

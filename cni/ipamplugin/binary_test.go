package ipamplugin

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// buildPlugin builds cmd/slingshot-ipam into a temporary directory and
// returns that directory.
func buildPlugin(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "slingshot-ipam"), "github.com/slingshot-k8s/slingshot/cmd/slingshot-ipam").CombinedOutput()
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

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

func TestRunHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run([]string{"--help"}, &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage: mock-sysfs --out DIR", "-numa-nodes", "-gpu-model", "link-down:cxiN",
		"DIR/proc", "DIR/dev", "h100, a100, mi250x, mi210"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "node")
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--out DIR is required"},
		{[]string{"--out", out, "--nics", "-1"}, "nics must be 0 to 64, not -1"},
		{[]string{"--out", out, "--numa-nodes", "0"}, "numa-nodes must be 1 to 64, not 0"},
		{[]string{"--out", out, "--gpu-vendor", "intel", "--gpus", "1"}, `gpu vendor must be nvidia or amd, not "intel"`},
		{[]string{"--out", out, "--gpu-model", "h100,b200"}, `unknown gpu model "b200"`},
		{[]string{"--out", out, "--fault", "melt:cxi0"}, "kind must be"},
		{[]string{"--out", out, "--nics", "2", "--fault", "link-down:cxi5"}, "no such NIC"},
		{[]string{"--out", out, "extra"}, `unexpected argument "extra"`},
		{[]string{"--out", out, "--nics", "many"}, "invalid value"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		err := run(c.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
		if !errors.As(err, new(usageError)) {
			t.Errorf("run(%q): %v is not a usage error", c.args, err)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a rejected command line wrote the output directory")
	}
}

func TestRunWritesAndPrints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	var out, errOut bytes.Buffer
	err := run([]string{"--out", dir, "--nics", "4", "--numa-nodes", "2", "--gpus", "2", "--gpu-vendor", "amd",
		"--fault", "link-down:cxi1", "--fault", "garbage:cxi2:device/properties/nid"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	for _, want := range []string{"wrote " + dir, "sysfs root " + filepath.Join(dir, "sys"), "cxi3", "AMD Instinct MI250X",
		"link-down:cxi1", "down", "dri/renderD129 kfd"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sys/class/cxi/cxi3")); err != nil {
		t.Error(err)
	}
}

func TestRunJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	var out, errOut bytes.Buffer
	if err := run([]string{"--out", dir, "--nics", "2", "--gpus", "1", "--json"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var truth mocksysfs.Truth
	if err := json.Unmarshal(out.Bytes(), &truth); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if len(truth.NICs) != 2 || len(truth.GPUs) != 1 || truth.SysRoot != filepath.Join(dir, "sys") {
		t.Errorf("truth %+v", truth)
	}
}

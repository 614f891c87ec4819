package flagenv

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	env := map[string]string{
		"P_KUBELET_DIR": "/from/env",
		"P_STATE_DIR":   "/env/state",
		"P_VERBOSE":     "true",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	kubelet := fs.String("kubelet-dir", "/var/lib/kubelet", "")
	state := fs.String("state-dir", "/var/lib/x", "")
	other := fs.String("other", "default", "")
	verbose := fs.Bool("verbose", false, "")
	if err := fs.Parse([]string{"--state-dir=/cli"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, "P_", lookup); err != nil {
		t.Fatal(err)
	}
	if *kubelet != "/from/env" || *state != "/cli" || *other != "default" || !*verbose {
		t.Fatalf("got kubelet=%q state=%q other=%q verbose=%v", *kubelet, *state, *other, *verbose)
	}
}

func TestApplyBadValue(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("count", 1, "")
	_ = fs.Parse(nil)
	err := Apply(fs, "P_", func(string) (string, bool) { return "many", true })
	if err == nil || !strings.Contains(err.Error(), "P_COUNT") {
		t.Fatalf("err = %v, want naming P_COUNT", err)
	}
}

func TestUsageListsEnv(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's `directory`")
	Usage(fs, "P_", "usage: t [flags]")()
	for _, want := range []string{"usage: t", "--kubelet-dir directory", `(default "/var/lib/kubelet")`, "env P_KUBELET_DIR"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

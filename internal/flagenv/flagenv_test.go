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
		"P_VERSION":     "true",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	kubelet := fs.String("kubelet-dir", "/var/lib/kubelet", "")
	state := fs.String("state-dir", "/var/lib/x", "")
	other := fs.String("other", "default", "")
	verbose := fs.Bool("verbose", false, "")
	version := fs.Bool(VersionFlag, false, "")
	if err := fs.Parse([]string{"--state-dir=/cli"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, "P_", lookup); err != nil {
		t.Fatal(err)
	}
	if *kubelet != "/from/env" || *state != "/cli" || *other != "default" || !*verbose || *version {
		t.Fatalf("got kubelet=%q state=%q other=%q verbose=%v version=%v (--version is never read from the environment)",
			*kubelet, *state, *other, *verbose, *version)
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
	fs.Bool(VersionFlag, false, "print the version and exit")
	Usage(fs, "P_", "usage: t [flags]")()
	for _, want := range []string{"usage: t", "--kubelet-dir directory", `(default "/var/lib/kubelet")`, "env P_KUBELET_DIR",
		"--version\n        print the version and exit\n        command line only\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "P_VERSION") {
		t.Errorf("usage names P_VERSION, which nothing reads:\n%s", out.String())
	}
}

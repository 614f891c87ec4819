package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/internal/version"
	"github.com/slingshot-k8s/slingshot/internal/version/versiontest"
)

// The running controller says which release it is in --version, in
// slingshot_build_info and in the header of its answers to agents, and
// all say the chart's appVersion: the one
// source of truth for the release.
func TestVersionAndBuildInfoAgreeWithTheChart(t *testing.T) {
	want := versiontest.ReadChart(t, "../..").AppVersion

	cmd := exec.Command(os.Args[0], "--version")
	// An environment that would stop the controller from starting stops
	// no --version, and none sets it.
	cmd.Env = append(os.Environ(), mainEnv+"=1", "SLINGSHOT_CONTROLLER_QUARANTINE=soon")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != "slingshot-controller "+want {
		t.Errorf("--version printed %q, want first line %q", out, "slingshot-controller "+want)
	}
	if string(out) != version.Get().String("slingshot-controller") {
		t.Errorf("--version printed %q, want %q", out, version.Get().String("slingshot-controller"))
	}

	if testing.Short() {
		t.Skip("starts the controller as a child process")
	}
	c := startChild(t, filepath.Join(t.TempDir(), "c.db"))
	var line string
	for _, addr := range c.http {
		line = buildInfoLine(t, "http://"+addr+"/metrics")
		if line != "" {
			break
		}
	}
	if line == "" {
		t.Fatalf("no slingshot_build_info on the /metrics of %v", c.http)
	}
	if !strings.Contains(line, `version="`+want+`"`) || !strings.HasSuffix(line, "} 1") {
		t.Errorf("slingshot_build_info is %q, want version=%q and value 1", line, want)
	}
	bi := version.Get()
	for _, l := range []string{`commit="` + bi.Commit + `"`, `build_date="` + bi.BuildDate + `"`, `go_version="` + bi.GoVersion + `"`} {
		if !strings.Contains(line, l) {
			t.Errorf("slingshot_build_info is %q, lacks %s", line, l)
		}
	}
	var md metadata.MD
	if _, err := dialChild(t, c).ListVNIs(t.Context(), &apiv1.ListVNIsRequest{}, grpc.Header(&md)); err != nil {
		t.Fatalf("ListVNIs: %v", err)
	}
	if got := md.Get(version.ControllerHeader); len(got) != 1 || got[0] != want {
		t.Errorf("the answer's header %s is %q, want %q", version.ControllerHeader, got, want)
	}
	// A method it does not serve, as a later agent may call, is refused
	// naming both releases.
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("slingshot-agent/9.9.9"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(t.Context(), "/slingshot.controller.v1.Controller/Later", &apiv1.ListVNIsRequest{}, &apiv1.ListVNIsResponse{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented ||
		!strings.Contains(st.Message(), "controller "+want) || !strings.Contains(st.Message(), "agent 9.9.9") {
		t.Errorf("a method it does not serve: %v, want Unimplemented naming controller %s and agent 9.9.9", err, want)
	}
}

// buildInfoLine is the slingshot_build_info sample at url, or "" when
// the server there serves no metrics (the hooks' server answers 404).
func buildInfoLine(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "slingshot_build_info{") {
			return sc.Text()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return ""
}

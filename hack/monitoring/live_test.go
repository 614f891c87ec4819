package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/dra"
	"github.com/slingshot-k8s/slingshot/controller/hooks"
	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

// The rules and the dashboard name only metrics and labels that a live
// agent and a live controller export: the real binaries, built from this
// tree, are started (the controller without a Kubernetes API, the agent on
// a generated sysfs with the simulated CXI driver and that controller),
// and their /metrics scraped. Leader election and the DRA front end need
// a Kubernetes API, which this test does not run: their families come
// from the real components' own registration (leader.New and
// dra.NewMetrics) instead.
func TestRulesAndDashboardNameExportedSeries(t *testing.T) {
	rgs, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	panels, err := DashboardQueries(root)
	if err != nil {
		t.Fatal(err)
	}
	queries := append(RuleQueries(rgs), panels...)

	bin := buildBinaries(t)
	// Not t.TempDir(): the kubelet socket paths under it would pass the
	// 107 bytes a unix socket's path may have. Removed after the programs
	// stop (cleanups run last first).
	dir, err := os.MkdirTemp("", "slingshot-mon")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The controller serves gRPC, the hooks and /metrics.
	ctrl := start(t, filepath.Join(bin, "slingshot-controller"), servingRE, 3,
		"--no-kube", "--auth", "none", "--store", "sqlite", "--db", filepath.Join(dir, "controller.db"),
		"--grpc-addr", "127.0.0.1:0", "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--ip-pools", "hsn0=10.150.0.0/16:/24", "--log-format", "text")
	var grpcAddr, hooksAddr, ctrlMetrics string
	for _, a := range ctrl.addrs {
		switch {
		case a.what == "grpc":
			grpcAddr = a.addr
		case answersMetrics(a.addr):
			ctrlMetrics = a.addr
		default:
			hooksAddr = a.addr
		}
	}
	if grpcAddr == "" || hooksAddr == "" || ctrlMetrics == "" {
		t.Fatalf("controller serves %v: want gRPC, hooks and /metrics addresses", ctrl.addrs)
	}
	// A Job's VNI, leased through the sync hook as Metacontroller would
	// ask, so that its namespace holds a lease: the namespace cap's fill is
	// exported per namespace holding leases.
	waitReady(t, ctrlMetrics, ctrl)
	syncJob(t, hooksAddr)

	truth, err := mocksysfs.Write(filepath.Join(dir, "machine"), mocksysfs.Spec{NICs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "agent.yaml")
	// The CDI spec directory defaults to the host's /var/run/cdi.
	if err := os.WriteFile(config, []byte("cdi: {specDir: "+filepath.Join(dir, "cdi")+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"kubelet", "state", "cdi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	agent := start(t, filepath.Join(bin, "slingshot-agent"), agentServingRE, 1,
		"--kubelet-dir", filepath.Join(dir, "kubelet"), "--sysfs-root", truth.SysRoot, "--dev-root", truth.DevRoot,
		"--proc-root", truth.ProcRoot, "--state-dir", filepath.Join(dir, "state"), "--cxi-driver", "sim",
		"--node-name", "n1", "--metrics-addr", "127.0.0.1:0", "--config", config, "--no-kube",
		"--ipam-socket", filepath.Join(dir, "ipam.sock"), "--controller", grpcAddr, "--log-format", "text")

	declared := &recorder{fams: Families{}}
	if _, err := dra.NewMetrics(declared); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.New(nil, leader.Config{Namespace: "ns", Name: "slingshot-controller", Identity: "a", Registerer: declared}); err != nil {
		t.Fatal(err)
	}

	// Some series appear once the agent has heard from the controller
	// (its IP pools): scrape until every query checks or the deadline.
	var errs []error
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams := Families{}
		for name, f := range declared.fams {
			fams.add(name, f.Type, sortedKeys(f.Labels)...)
		}
		for _, addr := range []string{agent.addrs[0].addr, ctrlMetrics} {
			if err := scrape(addr, fams); err != nil {
				t.Fatal(err)
			}
		}
		errs = errs[:0]
		for _, q := range queries {
			errs = append(errs, Check(q, fams)...)
		}
		if len(errs) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-agent.done:
			t.Fatalf("the agent exited:\n%s", agent.log())
		case <-ctrl.done:
			t.Fatalf("the controller exited:\n%s", ctrl.log())
		case <-time.After(200 * time.Millisecond): // the next scrape, not a wait for an event
		}
	}
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("agent log:\n%s", agent.log())
	}
	t.Logf("%d rule and panel queries checked against the live agent and controller", len(queries))
}

// The chart's ServiceMonitor gives the agent's series the node label the
// rules and panels group by.
func TestServiceMonitorAddsNodeLabel(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/helm/slingshot/templates/servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`sourceLabels: \[__meta_kubernetes_pod_node_name\]\s+targetLabel: node`).Match(b) {
		t.Fatal("the ServiceMonitor no longer relabels the pod's node into node")
	}
}

// The live check fails on a metric nobody exports, on a selector's label
// its metric lacks, and on a grouping label none of its metrics has; a
// histogram's series and the target labels pass.
func TestCheckRefusesWhatIsNotExported(t *testing.T) {
	fams := Families{}
	if err := ParseScrape(strings.NewReader(`# TYPE slingshot_agent_ready gauge
slingshot_agent_ready 1
# TYPE d_seconds histogram
d_seconds_bucket{op="a",le="1"} 1
d_seconds_bucket{op="a",le="+Inf"} 1
d_seconds_sum{op="a"} 0.5
d_seconds_count{op="a"} 1
`), fams); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		expr string
		ok   bool
	}{
		{`slingshot_agent_ready{node="n1"} == 0`, true},
		{`histogram_quantile(0.99, sum by (op, le) (rate(d_seconds_bucket[5m])))`, true},
		{`rate(d_seconds_sum[5m]) / rate(d_seconds_count{instance="x"}[5m])`, true},
		{`slingshot_agent_readyy == 0`, false},
		{`d_seconds{op="a"}`, false},
		{`d_seconds_bucket{nic="cxi0"}`, false},
		{`sum by (nic) (d_seconds_count)`, false},
		{`d_seconds_count{node="n1"}`, false}, // node is the agent's only
	} {
		errs := Check(Query{Where: "test", Expr: tt.expr}, fams)
		if (len(errs) == 0) != tt.ok {
			t.Errorf("%s: %v, want ok=%v", tt.expr, errs, tt.ok)
		}
	}
}

// buildBinaries builds the agent and the controller from the repository,
// with its own go.mod, as `make build` does.
func buildBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/slingshot-agent", "./cmd/slingshot-controller")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

var (
	servingRE      = regexp.MustCompile(`msg="serving (grpc|http)" addr=([0-9.:]+)`)
	agentServingRE = regexp.MustCompile(`msg="serving (metrics), health and inspect" addr=([0-9.:]+)`)
)

type served struct{ what, addr string }

type process struct {
	addrs []served
	done  chan struct{}
	mu    sync.Mutex
	buf   bytes.Buffer
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// start runs a binary until the test ends and waits until it has logged
// the want addresses it serves (lines matching re).
func start(t *testing.T, path string, re *regexp.Regexp, want int, args ...string) *process {
	t.Helper()
	cmd := exec.Command(path, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{done: make(chan struct{})}
	addrs := make(chan served, 8)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.buf.WriteString(line + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil {
				addrs <- served{m[1], m[2]}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	timeout := time.After(60 * time.Second)
	for len(p.addrs) < want {
		select {
		case a := <-addrs:
			p.addrs = append(p.addrs, a)
		case <-p.done:
			t.Fatalf("%s exited at start:\n%s", filepath.Base(path), p.log())
		case <-timeout:
			t.Fatalf("%s logged %d of the %d addresses it serves in a minute:\n%s", filepath.Base(path), len(p.addrs), want, p.log())
		}
	}
	return p
}

// waitReady polls p's /readyz at addr until it answers 200: the
// controller refuses hook calls (429) while it loads its state.
func waitReady(t *testing.T, addr string, p *process) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last string
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in 30 s (last answer: %s):\n%s", last, p.log())
		}
		select {
		case <-p.done:
			t.Fatalf("exited before it was ready:\n%s", p.log())
		case <-time.After(50 * time.Millisecond): // the next poll
		}
	}
}

// syncJob posts Metacontroller's sync of a Job to the hooks and expects
// its VNI attached.
func syncJob(t *testing.T, addr string) {
	t.Helper()
	body, err := json.Marshal(hooks.Request{Object: &hooks.Object{APIVersion: "batch/v1", Kind: "Job",
		Metadata: hooks.ObjectMeta{Name: "train", Namespace: "team-a", UID: "0b7c6a52-4c1e-4a3c-9d55-5a8d1f1e2b01"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/sync", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sync hook: %s %s", resp.Status, out)
	}
}

func answersMetrics(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func scrape(addr string, into Families) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	if err := ParseScrape(resp.Body, into); err != nil {
		return fmt.Errorf("scrape %s: %w", addr, err)
	}
	return nil
}

// The recorder reads what a component declares: a vector's labels before
// it has children, and a histogram's type, vector or not.
func TestRecorderReadsDeclaredFamilies(t *testing.T) {
	r := &recorder{fams: Families{}}
	r.MustRegister(
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"op", "result"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "plain_seconds", Help: "p"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"reason"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"}),
	)
	series := r.fams.Series()
	for _, tt := range []struct {
		name   string
		labels []string
	}{
		{"h_seconds_bucket", []string{"le", "op", "result"}},
		{"h_seconds_count", []string{"op", "result"}},
		{"plain_seconds_bucket", []string{"le"}},
		{"c_total", []string{"reason"}},
		{"g", nil},
	} {
		got, ok := series[tt.name]
		if !ok {
			t.Errorf("no series %s in %v", tt.name, sortedKeys(boolSet(series)))
			continue
		}
		if k := sortedKeys(got); !slices.Equal(k, tt.labels) && (len(k) > 0 || len(tt.labels) > 0) {
			t.Errorf("%s: labels %v, want %v", tt.name, k, tt.labels)
		}
	}
	if _, ok := series["h_seconds"]; ok {
		t.Error("a classic histogram's bare name counted as a series")
	}
}

func boolSet[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

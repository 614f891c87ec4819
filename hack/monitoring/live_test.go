package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/controller/hooks"
	"github.com/slingshot-k8s/slingshot/controller/leader"
)

// modeOnly are the agent's families that one front end (--api) alone
// exports, by name or, ending in "_", by prefix: the rest the agent
// registers in both modes. The check below fails on a family listed here
// that the other mode exports, or that this mode does not, so the list
// cannot go stale.
var modeOnly = map[string][]string{
	// The device-plugin servers' own registry entries.
	apiDevicePlugin: {"slingshot_agent_deviceplugin_"},
	// The claims' operations, the NRI connection and the claim status
	// writes (dra.NewMetrics).
	apiDRA: {"slingshot_agent_dra_operation_seconds", "slingshot_agent_nri_connected", "slingshot_agent_dra_claim_status_writes_total"},
}

// onlyIn reports whether family is one that only mode api exports.
func onlyIn(api, family string) bool {
	return slices.ContainsFunc(modeOnly[api], func(p string) bool { return namedBy(p, family) })
}

// namedBy reports whether a modeOnly entry p names family.
func namedBy(p, family string) bool {
	return family == p || strings.HasSuffix(p, "_") && strings.HasPrefix(family, p)
}

// The rules and the dashboard name only metrics and labels that a live
// agent in each mode and a live controller export: the real binaries,
// built from this tree, are started (the controller without a Kubernetes
// API; an agent serving the device plugin and one serving DRA, each on a
// generated sysfs with the simulated CXI driver and that controller; see
// startAgentNode), and their /metrics scraped. Every query is checked
// against each mode's agent: a family both modes export must be exported
// by each, with the labels the query uses; one only the other mode
// exports (modeOnly) is taken from that mode's agent. Leader election
// needs a Kubernetes API the controller does not have here: its families
// come from the real component's own registration (leader.New) instead.
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
	dir := shortTempDir(t)
	ctrl := startController(t, bin, filepath.Join(dir, "controller"))
	// A Job's VNI, leased through the sync hook as Metacontroller would
	// ask, so that its namespace holds a lease: the namespace cap's fill is
	// exported per namespace holding leases.
	syncJob(t, ctrl.hooks)
	apis := []string{apiDevicePlugin, apiDRA}
	nodes := map[string]*agentNode{}
	for i, api := range apis {
		nodes[api] = startAgentNode(t, bin, filepath.Join(dir, api), api, "n"+strconv.Itoa(i+1), ctrl.grpc)
	}
	// A claim's life, prepared, bound at its pod's sandbox and
	// unprepared: the DRA operations' histogram has series once one was
	// measured.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := nodes[apiDRA].claimLife(ctx); err != nil {
		t.Fatal(err)
	}

	declared := &recorder{fams: Families{}}
	if _, err := leader.New(nil, leader.Config{Namespace: "ns", Name: "slingshot-controller", Identity: "a", Registerer: declared}); err != nil {
		t.Fatal(err)
	}

	// Some series appear once the agent has heard from the controller
	// (its IP pools): scrape until every query checks or the deadline.
	for i, api := range apis {
		other := apis[1-i]
		t.Run(api, func(t *testing.T) {
			var errs []error
			deadline := time.Now().Add(30 * time.Second)
			for {
				errs = errs[:0]
				fams := Families{}
				fams.merge(declared.fams)
				if err := scrape(ctrl.metrics, fams); err != nil {
					t.Fatal(err)
				}
				own, others := Families{}, Families{}
				if err := scrape(nodes[api].metrics, own); err != nil {
					t.Fatal(err)
				}
				if err := scrape(nodes[other].metrics, others); err != nil {
					t.Fatal(err)
				}
				fams.merge(own)
				for _, p := range modeOnly[api] {
					if !slices.ContainsFunc(slices.Collect(maps.Keys(own)), func(f string) bool { return namedBy(p, f) }) {
						errs = append(errs, fmt.Errorf("the agent exports no %s, listed as its mode's own", p))
					}
				}
				for name, f := range others {
					if !onlyIn(other, name) {
						continue
					}
					if _, ok := own[name]; ok {
						errs = append(errs, fmt.Errorf("the agent exports %s, listed as the %s mode's own", name, other))
					}
					fams[name] = f
				}
				for _, q := range queries {
					errs = append(errs, Check(q, fams)...)
				}
				if len(errs) == 0 || time.Now().After(deadline) {
					break
				}
				select {
				case <-ctrl.proc.done:
					t.Fatalf("the controller exited:\n%s", ctrl.proc.log())
				case <-nodes[api].proc.done:
					t.Fatalf("the %s agent exited", api) // its log follows (startAgentNode)
				case <-nodes[other].proc.done:
					t.Fatalf("the %s agent exited", other)
				case <-time.After(200 * time.Millisecond): // the next scrape, not a wait for an event
				}
			}
			for _, err := range errs {
				t.Error(err)
			}
			t.Logf("%d rule and panel queries checked against the live controller and the %s agent", len(queries), api)
		})
	}
}

// shortTempDir is a directory for a test's programs, removed after them
// (cleanups run last first). Not t.TempDir(): the kubelet socket paths
// under a directory named for the test would pass the 107 bytes a unix
// socket's path may have.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "slingshot-mon")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// controllerProc is a running controller and the addresses it serves.
type controllerProc struct {
	proc                 *process
	grpc, hooks, metrics string
}

// startController starts the controller without a Kubernetes API, its
// state in a sqlite file under dir, and waits until it is ready.
func startController(t *testing.T, bin, dir string) *controllerProc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The controller serves gRPC, the hooks and /metrics.
	p := start(t, filepath.Join(bin, "slingshot-controller"), servingRE, 3,
		"--no-kube", "--auth", "none", "--store", "sqlite", "--db", filepath.Join(dir, "controller.db"),
		"--grpc-addr", "127.0.0.1:0", "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--ip-pools", "hsn0=10.150.0.0/16:/24", "--log-format", "text")
	c := &controllerProc{proc: p}
	for _, a := range p.addrs {
		switch {
		case a.what == "grpc":
			c.grpc = a.addr
		case answersMetrics(a.addr):
			c.metrics = a.addr
		default:
			c.hooks = a.addr
		}
	}
	if c.grpc == "" || c.hooks == "" || c.metrics == "" {
		t.Fatalf("controller serves %v: want gRPC, hooks and /metrics addresses", p.addrs)
	}
	// The controller refuses hook calls (429) while it loads its state.
	waitReady(t, c.metrics, p)
	return c
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

package gang

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/hack/kube-apiserver/apiserver"
)

// srv is the API server the benchmark runs on.
var srv *apiserver.Server

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

// testMain starts etcd and kube-apiserver as hack/kube-apiserver/e2e
// does (KUBE_APISERVER, ETCD, E2E_K8S_REQUIRED), with the store's CRDs.
func testMain(m *testing.M) int {
	// The package holds a benchmark only: go test ./... (make e2e-k8s)
	// need not start an API server for it.
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		return m.Run()
	}
	return apiserver.RunTests("gang", "make gang-bench builds and installs them", kube.CRDs, "crds/*.yaml",
		func(s *apiserver.Server) int {
			srv = s
			return m.Run()
		})
}

// buildController builds slingshot-controller, as it ships, into dir.
func buildController(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "slingshot-controller")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/slingshot-controller")
	cmd.Dir = filepath.Join("..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build slingshot-controller: %v\n%s", err, out)
	}
	return bin
}

// writeKubeconfig writes an admin kubeconfig for the API server.
func writeKubeconfig(tb testing.TB, dir string) string {
	tb.Helper()
	p := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gang
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: gang
  context: {cluster: gang, user: admin}
current-context: gang
`, srv.Config.Host, srv.Config.BearerToken)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// controllerProc is one slingshot-controller process.
type controllerProc struct {
	cmd     *exec.Cmd
	log     string
	grpc    string // its gRPC address
	metrics string // its /metrics address
	// done closes when the process has exited; err is then Wait's.
	done chan struct{}
	err  error
}

// startController runs slingshot-controller with args after the flags
// that every run here needs, logging to logPath, and waits until it
// serves gRPC and metrics. stop kills it and waits for it.
func startController(tb testing.TB, bin, logPath string, args ...string) (*controllerProc, func()) {
	tb.Helper()
	args = append([]string{"--auth", "none", "--grpc-addr", "127.0.0.1:0", "--hooks-addr=",
		"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	// Killed with the test binary, should it die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &controllerProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	grpcAddr, httpAddr := make(chan string, 1), make(chan string, 1)
	// The reader goroutine ends when the process's stderr closes, that is
	// when it exits; stop waits for that.
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintf(logf, "%s\n", sc.Bytes())
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			ch := map[string]chan string{"serving grpc": grpcAddr, "serving http": httpAddr}[line.Msg]
			select {
			case ch <- line.Addr: // the first of each; a nil ch never receives
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.done)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-p.done
		})
	}
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	for p.grpc == "" || p.metrics == "" {
		select {
		case p.grpc = <-grpcAddr:
		case p.metrics = <-httpAddr:
		case <-p.done:
			tb.Fatalf("slingshot-controller exited: %v (log %s)", p.err, logPath)
		case <-timeout.C:
			stop()
			tb.Fatalf("slingshot-controller did not serve within 2 min (log %s)", logPath)
		}
	}
	return p, stop
}

// logTail returns the last lines of the controller's log, for a failure
// report.
func (p *controllerProc) logTail(lines int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// metricLine is one sample of the Prometheus text format: name{labels} value.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// sample is one metric sample.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the samples of the named metrics from the text format.
func parseMetrics(r io.Reader, names ...string) ([]sample, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		m := metricLine.FindStringSubmatch(sc.Text())
		if m == nil || !want[m[1]] {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// scrapeController reads the controller's /metrics.
func scrapeController(ctx context.Context, addr string, names ...string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape controller: %w", err)
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body, names...)
}

// procCPU returns the user plus system CPU time process pid has used,
// from /proc/PID/stat (utime and stime, fields 14 and 15, in the USER_HZ
// ticks of 1/100 s that Linux reports on every architecture Go runs).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces; it ends at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): utime is f[11], stime f[12].
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// childPIDs returns this process's children by command name (etcd,
// kube-apiserver and the controller, which the harness started).
func childPIDs() (map[string]int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", os.Getpid()))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				continue
			}
			out[strings.TrimSpace(string(comm))] = pid
		}
	}
	return out, nil
}

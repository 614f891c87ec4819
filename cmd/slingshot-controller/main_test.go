package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const childEnv = "SLINGSHOT_CONTROLLER_TEST_CHILD"

// mainEnv makes this test binary run main() with its arguments.
const mainEnv = "SLINGSHOT_CONTROLLER_TEST_MAIN"

// TestMain lets the crash test re-execute this binary as the controller,
// and the version test run main itself.
func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	if os.Getenv(childEnv) == "1" {
		cfg, err := parseFlags(nil, os.Getenv, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := run(ctx, cfg, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(*Config) error
	}{
		{name: "defaults", check: func(c *Config) error {
			if c.controller.VNIRange.Min != 1024 || c.controller.VNIRange.Max != 65535 || c.Auth != "tokenreview" {
				return fmt.Errorf("defaults: %+v", c.controller.VNIRange)
			}
			if c.controller.MaxLeasesPerNamespace != 256 {
				return fmt.Errorf("leases per namespace cap %d, want 256", c.controller.MaxLeasesPerNamespace)
			}
			return nil
		}},
		{name: "env fills unset flags", args: []string{"--vni-range", "2000-3000"},
			env: map[string]string{"SLINGSHOT_CONTROLLER_VNI_RANGE": "5000-6000", "SLINGSHOT_CONTROLLER_POD_VNI_RANGE": "2500-2599"},
			check: func(c *Config) error {
				if c.controller.VNIRange.Min != 2000 || c.controller.PodVNIRange.Min != 2500 {
					return fmt.Errorf("flag must win over env, env fills the rest: %+v %+v", c.controller.VNIRange, c.controller.PodVNIRange)
				}
				return nil
			}},
		{name: "ip pools", args: []string{"--ip-pools", "hsn0=10.150.0.0/16:/24, hsn1=fd00::/48:/64"}, check: func(c *Config) error {
			if len(c.controller.IPPools) != 2 {
				return fmt.Errorf("pools %v", c.controller.IPPools)
			}
			return nil
		}},
		{name: "bad range", args: []string{"--vni-range", "10-5"}, wantErr: "--vni-range"},
		{name: "pod range outside", args: []string{"--pod-vni-range", "100-200"}, wantErr: "pod vni range"},
		{name: "bad pool", args: []string{"--ip-pools", "hsn0=10.150.0.1/16:/24"}, wantErr: "--ip-pools"},
		{name: "tokenreview needs kube", args: []string{"--no-kube"}, wantErr: "needs the Kubernetes API"},
		{name: "mtls needs files", args: []string{"--auth", "mtls"}, wantErr: "--client-ca"},
		{name: "bad auth", args: []string{"--auth", "magic"}, wantErr: "want tokenreview"},
		{name: "bad env value", env: map[string]string{"SLINGSHOT_CONTROLLER_QUARANTINE": "soon"}, wantErr: "SLINGSHOT_CONTROLLER_QUARANTINE"},
		{name: "cert without key", args: []string{"--tls-cert", "x"}, wantErr: "go together"},
		{name: "bad kinds", args: []string{"--owner-kinds", "Job"}, wantErr: "--owner-kinds"},
		{name: "binding conditions of a bad driver", args: []string{"--dra-binding-conditions", "CXI"}, wantErr: "want a DRA driver name"},
		{name: "binding conditions, node stale too short", args: []string{"--dra-binding-conditions", "cxi.slingshot.hpe.com", "--dra-node-stale", "10ms"}, wantErr: "--dra-node-stale"},
		{name: "PodGroup claims without binding conditions", args: []string{"--dra-podgroup-claims"}, wantErr: "--dra-podgroup-claims: only with --dra-binding-conditions"},
		{name: "binding conditions need kube", args: []string{"--dra-binding-conditions", "cxi.slingshot.hpe.com", "--no-kube", "--auth", "none"}, wantErr: "--dra-binding-conditions needs the Kubernetes API"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
		// --version answers before the environment and validation: it
		// must work where the controller could not start.
		{name: "version", args: []string{"--version"}, wantErr: errVersion.Error()},
		{name: "version beside bad flags", args: []string{"--vni-range", "10-5", "--version"},
			env: map[string]string{"SLINGSHOT_CONTROLLER_QUARANTINE": "soon"}, wantErr: errVersion.Error()},
		{name: "no version from the environment", env: map[string]string{"SLINGSHOT_CONTROLLER_VERSION": "true"}, check: func(c *Config) error {
			if c.ShowVersion {
				return errors.New("SLINGSHOT_CONTROLLER_VERSION set --version")
			}
			return nil
		}},
		{name: "no namespace cap", args: []string{"--max-leases-per-namespace", "0"}, check: func(c *Config) error {
			if c.controller.MaxLeasesPerNamespace != 0 {
				return fmt.Errorf("leases per namespace cap %d, want 0 (none)", c.controller.MaxLeasesPerNamespace)
			}
			return nil
		}},
		{name: "negative namespace cap", args: []string{"--max-leases-per-namespace", "-1"}, wantErr: "--max-leases-per-namespace"},
		{name: "hwcoll off by default", check: func(c *Config) error {
			if coll, err := c.HWColl.collectives(); coll != nil || err != nil {
				return fmt.Errorf("collectives %+v, %v; want off", coll, err)
			}
			return nil
		}},
		{name: "hwcoll on", args: []string{"--hwcoll-fm-url", "https://fmn:8000", "--hwcoll-job-fm-url", "https://fm.hsn:8000",
			"--hwcoll-addrs-per-job", "4"}, env: map[string]string{"SLINGSHOT_CONTROLLER_HWCOLL_JOB_PREFIX": "east"},
			check: func(c *Config) error {
				coll, err := c.HWColl.collectives()
				if err != nil || coll == nil || coll.JobPrefix != "east" || coll.AddrsPerJob != 4 || coll.MinNodes != 2 || coll.JobURL != "https://fm.hsn:8000" {
					return fmt.Errorf("collectives %+v, %v", coll, err)
				}
				return nil
			}},
		{name: "hwcoll bad url", args: []string{"--hwcoll-fm-url", "fmn:8000"}, wantErr: "--hwcoll-fm-url"},
		{name: "hwcoll cert without key", args: []string{"--hwcoll-fm-url", "https://fmn", "--hwcoll-cert", "c.pem"}, wantErr: "--hwcoll-key"},
		{name: "hwcoll bad prefix", args: []string{"--hwcoll-fm-url", "https://fmn", "--hwcoll-job-prefix", "East_1"}, wantErr: "--hwcoll-job-prefix"},
		{name: "hwcoll zero addrs", args: []string{"--hwcoll-fm-url", "https://fmn", "--hwcoll-addrs-per-job", "0"}, wantErr: "--hwcoll-addrs-per-job"},
		{name: "hwcoll needs kube", args: []string{"--hwcoll-fm-url", "https://fmn", "--no-kube", "--auth", "none"}, wantErr: "--hwcoll-fm-url needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.check(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var b strings.Builder
	if _, err := parseFlags([]string{"--help"}, env(nil), &b); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, f := range []string{"grpc-addr", "hooks-addr", "metrics-addr", "db", "vni-range", "pod-vni-range", "ip-pools",
		"quarantine", "slice-ttl", "slice-grace", "owner-kinds", "no-kube", "auth", "tls-cert", "client-ca", "SLINGSHOT_CONTROLLER_", "--version"} {
		if !strings.Contains(b.String(), f) {
			t.Errorf("--help lacks %s", f)
		}
	}
}

// child is the controller running as a child process.
type child struct {
	cmd    *exec.Cmd
	addr   string
	http   []string // the HTTP servers' addresses, complete once loaded is closed
	loaded chan struct{}
	done   chan struct{} // closed when the process has exited
	err    error         // its exit status, once done
}

func startChild(t *testing.T, db string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), childEnv+"=1",
		"SLINGSHOT_CONTROLLER_DB="+db, "SLINGSHOT_CONTROLLER_NO_KUBE=true", "SLINGSHOT_CONTROLLER_AUTH=none",
		"SLINGSHOT_CONTROLLER_GRPC_ADDR=127.0.0.1:0", "SLINGSHOT_CONTROLLER_HOOKS_ADDR=127.0.0.1:0",
		"SLINGSHOT_CONTROLLER_METRICS_ADDR=127.0.0.1:0", "SLINGSHOT_CONTROLLER_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, loaded: make(chan struct{}), done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Msg {
			case "serving grpc":
				addr <- line.Addr
			case "serving http":
				c.http = append(c.http, line.Addr)
			case "state loaded; answering requests":
				close(c.loaded)
			}
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	select {
	case c.addr = <-addr:
	case <-c.done:
		t.Fatalf("controller exited: %v", c.err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("controller did not start in 30s")
	}
	select {
	case <-c.loaded:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("controller did not load in 30s")
	}
	t.Cleanup(func() { cmd.Process.Kill(); <-c.done })
	return c
}

func dialChild(t *testing.T, c *child) apiv1.ControllerClient {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return apiv1.NewControllerClient(conn)
}

// TestCrashLosesNoAcknowledgedLease kills the controller with SIGKILL in
// the middle of an acquire storm and restarts it on the same database:
// every acknowledged lease is there with its VNI, and no VNI is leased twice.
func TestCrashLosesNoAcknowledgedLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the controller as a child process")
	}
	db := filepath.Join(t.TempDir(), "controller.db")
	// One namespace takes more leases than the default cap allows.
	first := startChild(t, db, "SLINGSHOT_CONTROLLER_MAX_LEASES_PER_NAMESPACE=0")
	api := dialChild(t, first)

	var mu sync.Mutex
	acked := map[string]uint32{} // lease key -> vni
	var n atomic.Int64
	const killAfter = 1500
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				uid := fmt.Sprintf("uid-%d-%d", g, i)
				l, err := api.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{
					Pod: &apiv1.PodRef{Namespace: "crash", Name: fmt.Sprintf("p-%d-%d", g, i), Uid: uid}, Node: "n1"})
				cancel()
				if err != nil {
					select {
					case <-killed:
						return // the controller is gone
					default:
						t.Errorf("acquire before the kill: %v", err)
						return
					}
				}
				mu.Lock()
				acked[l.Key] = l.Vni
				mu.Unlock()
				if n.Add(1) == killAfter {
					close(killed)
					first.cmd.Process.Signal(syscall.SIGKILL)
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		// Every acquirer failed before the kill: stop the child anyway,
		// so that the test fails instead of waiting for it forever.
		_ = first.cmd.Process.Signal(syscall.SIGKILL)
		<-first.done
		t.Fatalf("the storm stopped after %d acquires, before the kill", n.Load())
	}
	<-first.done

	second := startChild(t, db, "SLINGSHOT_CONTROLLER_MAX_LEASES_PER_NAMESPACE=0")
	api = dialChild(t, second)
	list, err := api.ListVNIs(t.Context(), &apiv1.ListVNIsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]uint32{}
	byVNI := map[uint32]string{}
	for _, l := range list.Leases {
		if other, dup := byVNI[l.Vni]; dup {
			t.Errorf("vni %d leased to %s and %s", l.Vni, other, l.Key)
		}
		byVNI[l.Vni] = l.Key
		stored[l.Key] = l.Vni
	}
	for key, vni := range acked {
		if got, ok := stored[key]; !ok || got != vni {
			t.Errorf("acknowledged lease %s vni %d: after restart %d (present %v)", key, vni, got, ok)
		}
	}
	t.Logf("%d leases acknowledged before SIGKILL, %d stored after restart", len(acked), len(stored))
	if len(acked) < killAfter {
		t.Fatalf("only %d acknowledged", len(acked))
	}
	// Acquire stays idempotent across the crash.
	for key, vni := range acked {
		parts := strings.Split(key, "/") // pod/crash/uid-g-i
		var g, i int
		fmt.Sscanf(parts[2], "uid-%d-%d", &g, &i)
		l, err := api.AcquireJobVNI(t.Context(), &apiv1.AcquireJobVNIRequest{
			Pod: &apiv1.PodRef{Namespace: "crash", Name: fmt.Sprintf("p-%d-%d", g, i), Uid: parts[2]}, Node: "n1"})
		if err != nil || l.Vni != vni {
			t.Fatalf("re-acquire %s: %v %v, want vni %d", key, l, err, vni)
		}
		break
	}
}

package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
)

// nonLoopbackIP is an address of this host that other hosts could reach.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this host has no non-loopback IPv4 address")
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Issue 15, item 10: /inspect takes no credentials, so it is answered only
// on connections to a loopback address: on --inspect-addr, or on
// --metrics-addr when that is a loopback address (the default); never on
// the node's address, where the chart's probes and Prometheus connect.
// The server has read, header, write and idle timeouts.
func TestIssue15Item10AgentHTTP(t *testing.T) {
	node := nonLoopbackIP(t)
	tests := []struct {
		name           string
		metrics        string
		inspectAddr    string
		inspectMetrics bool // /inspect answered on the metrics address
	}{
		{"metrics on the node's address", node + ":0", "", false},
		{"metrics on the node's address, inspect on loopback", node + ":0", "127.0.0.1:0", false},
		{"metrics on loopback (the default)", "127.0.0.1:0", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ready atomic.Bool
			report := func(context.Context) *inspect.Report { return &inspect.Report{Node: "n1"} }
			srv, lis, err := serveHTTP(tt.metrics, tt.inspectAddr, prometheus.NewRegistry(), &ready, nil, report, func() string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
				t.Errorf("timeouts: header %v, read %v, write %v, idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(lis) }()
			metricsURL := "http://" + lis.Addr().String()
			if code, _ := get(t, metricsURL+"/metrics"); code != http.StatusOK {
				t.Errorf("/metrics: %d", code)
			}
			if code, _ := get(t, metricsURL+inspect.Path); (code == http.StatusOK) != tt.inspectMetrics {
				t.Errorf("/inspect on %s: %d, want answered %v", tt.metrics, code, tt.inspectMetrics)
			}
			var inspectURL string
			if tt.inspectAddr != "" {
				inspectURL = "http://" + lis.(*multiListener).ls[1].Addr().String()
				if code, body := get(t, inspectURL+inspect.Path); code != http.StatusOK {
					t.Errorf("/inspect on %s: %d %s", tt.inspectAddr, code, body)
				}
			}
			if err := srv.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("serve: %v", err)
			}
			if inspectURL != "" {
				if _, err := http.Get(inspectURL + inspect.Path); err == nil {
					t.Error("the inspect address still answers after Shutdown")
				}
			}
		})
	}
}

func TestIssue15Item10InspectAddrLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9480", ":9480", "192.0.2.1:9480", "[::]:9480", "9480"} {
		var ready atomic.Bool
		if _, _, err := serveHTTP("", addr, prometheus.NewRegistry(), &ready, nil, nil, nil); !errors.Is(err, errInspectNotLoopback) {
			t.Errorf("serveHTTP with --inspect-addr %s: %v", addr, err)
		}
		o := defaults(t)
		o.InspectAddr = addr
		if err := o.Validate(); !errors.Is(err, errInspectNotLoopback) {
			t.Errorf("Validate with --inspect-addr %s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9480", "[::1]:9480", "localhost:9480"} {
		o := defaults(t)
		o.InspectAddr = addr
		if err := o.Validate(); err != nil {
			t.Errorf("Validate with --inspect-addr %s: %v", addr, err)
		}
	}
}

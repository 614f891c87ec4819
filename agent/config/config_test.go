package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; empty means valid
		check   func(t *testing.T, c Config)
	}{
		{name: "empty gives defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.NICResource.Name != "hpe.com/cxi" || c.NICResource.SharesPerNIC != 1 {
				t.Errorf("nicResource = %+v", c.NICResource)
			}
			if c.AllowOpenDefaultService {
				t.Error("an open default service is accepted by default")
			}
			if !c.CDIEnabled() || c.PodResources.PollInterval.Duration != time.Second {
				t.Errorf("defaults wrong: %+v", c)
			}
		}},
		{name: "drainAfter defaults to 5m", yaml: "", check: func(t *testing.T, c Config) {
			if c.Cleanup.DrainAfter.Duration != 5*time.Minute {
				t.Errorf("cleanup.drainAfter = %v, want 5m", c.Cleanup.DrainAfter)
			}
		}},
		{name: "drainAfter set", yaml: "cleanup: {drainAfter: 30s}", check: func(t *testing.T, c Config) {
			if c.Cleanup.DrainAfter.Duration != 30*time.Second {
				t.Errorf("cleanup.drainAfter = %v, want 30s", c.Cleanup.DrainAfter)
			}
		}},
		{name: "drainAfter too short", yaml: "cleanup: {drainAfter: 100ms}", wantErr: "cleanup.drainAfter"},
		{name: "overrides", yaml: `
nicResource: {name: example.com/hsn, sharesPerNIC: 4}
trafficClasses: [BULK_DATA]
limits: {TXQs: {max: 64, res: 2}}
membership: {fallbackGID: 1000}
podResources: {pollInterval: 500ms}
cdi: {enabled: false}
allowOpenDefaultService: true
`, check: func(t *testing.T, c Config) {
			if !c.AllowOpenDefaultService {
				t.Error("allowOpenDefaultService: true not read")
			}
			if c.NICResource.Name != "example.com/hsn" || c.NICResource.SharesPerNIC != 4 {
				t.Errorf("nicResource = %+v", c.NICResource)
			}
			if c.Limits["TXQs"] != (Limit{Max: 64, Res: 2}) {
				t.Errorf("limits = %+v", c.Limits)
			}
			if c.Membership.FallbackGID == nil || *c.Membership.FallbackGID != 1000 {
				t.Errorf("membership = %+v", c.Membership)
			}
			if c.CDIEnabled() || c.PodResources.PollInterval.Duration != 500*time.Millisecond {
				t.Errorf("cdi/pod resources wrong: %+v", c)
			}
		}},
		{name: "machine types", yaml: `
gpu:
  domain: example.org
  machineTypes:
  - {name: compute-xlarge, cpu: "32", memory: 256Gi, gpu: {type: nvidia, count: 2, family: H100}, nicsPerUnit: 1}
  nodePool:
  - {node: n1, mode: maintenance, machineType: compute-xlarge}
`, check: func(t *testing.T, c Config) {
			e, mt, ok := c.GPU.NodeEntry("n1")
			if !ok || e.Mode != ModeMaintenance || mt.GPU.Count != 2 {
				t.Errorf("NodeEntry = %+v %+v %v", e, mt, ok)
			}
			if _, _, ok := c.GPU.NodeEntry("n2"); ok {
				t.Error("NodeEntry(n2) found")
			}
		}},
		{name: "unknown field", yaml: "nicResorce: {}", wantErr: "unknown field"},
		{name: "bad resource name", yaml: "nicResource: {name: cxi}", wantErr: "nicResource.name"},
		{name: "shares zero", yaml: "nicResource: {sharesPerNIC: 0}", wantErr: "sharesPerNIC"},
		{name: "hsn interface", yaml: "nicResource: {hsnInterface: {enabled: true, mode: ipvlan, name: fabric0, pool: storage, mtu: 9000}}", check: func(t *testing.T, c Config) {
			want := HSNInterface{Enabled: true, Mode: "ipvlan", Name: "fabric0", Pool: "storage", MTU: 9000}
			if !reflect.DeepEqual(c.NICResource.HSNInterface, want) {
				t.Errorf("hsnInterface = %+v, want %+v", c.NICResource.HSNInterface, want)
			}
		}},
		{name: "hsn interface on every NIC", yaml: "nicResource: {hsnInterface: {enabled: true, allNICs: true, poolByNetdev: {hsn1: rail1}}}", check: func(t *testing.T, c Config) {
			h := c.NICResource.HSNInterface
			if !h.AllNICs || h.PoolByNetdev["hsn1"] != "rail1" || h.Pool != "hsn0" {
				t.Errorf("hsnInterface = %+v, want every NIC, hsn1's pool rail1, the rest hsn0", h)
			}
		}},
		{name: "hsn pool by netdev, bad pool", yaml: "nicResource: {hsnInterface: {poolByNetdev: {hsn1: Rail_1}}}", wantErr: "nicResource.hsnInterface.poolByNetdev.hsn1"},
		{name: "hsn pool by netdev, bad netdev", yaml: "nicResource: {hsnInterface: {poolByNetdev: {\"a b\": rail1}}}", wantErr: "nicResource.hsnInterface.poolByNetdev"},
		{name: "hsn interface defaults", yaml: "nicResource: {hsnInterface: {enabled: true}}", check: func(t *testing.T, c Config) {
			want := HSNInterface{Enabled: true, Mode: "macvlan", Name: "hsn0", Pool: "hsn0"}
			if !reflect.DeepEqual(c.NICResource.HSNInterface, want) {
				t.Errorf("hsnInterface = %+v, want %+v", c.NICResource.HSNInterface, want)
			}
		}},
		{name: "hsn mode", yaml: "nicResource: {hsnInterface: {mode: bridge}}", wantErr: `nicResource.hsnInterface.mode: "bridge"`},
		{name: "hsn name too long", yaml: "nicResource: {hsnInterface: {name: averyveryverylongname}}", wantErr: "nicResource.hsnInterface.name"},
		{name: "hsn pool", yaml: "nicResource: {hsnInterface: {pool: Hsn_0}}", wantErr: "nicResource.hsnInterface.pool"},
		{name: "hsn mtu", yaml: "nicResource: {hsnInterface: {mtu: -1}}", wantErr: "nicResource.hsnInterface.mtu"},
		{name: "unknown traffic class", yaml: "trafficClasses: [FAST]", wantErr: `unknown class "FAST"`},
		{name: "no traffic class", yaml: "trafficClasses: []", wantErr: "at least one"},
		{name: "res over max", yaml: "limits: {EQs: {max: 1, res: 2}}", wantErr: "limits.EQs"},
		{name: "unknown limit", yaml: "limits: {FOOs: {max: 1}}", wantErr: `unknown resource "FOOs"`},
		{name: "two fallbacks", yaml: "membership: {fallbackUID: 1, fallbackGID: 2}", wantErr: "not both"},
		{name: "bad duration", yaml: "podResources: {pollInterval: soon}", wantErr: "duration"},
		{name: "poll too fast", yaml: "podResources: {pollInterval: 1ns}", wantErr: "pollInterval"},
		{name: "relative cdi dir", yaml: "cdi: {specDir: run/cdi}", wantErr: "cdi.specDir"},
		{name: "bad machine type", yaml: `
gpu:
  machineTypes: [{name: X, gpu: {type: intel, count: 0, product: a, family: b}}]
  nodePool: [{node: n1, mode: busy, machineType: y}]
`, wantErr: "gpu.machineTypes[0].name"},
		{name: "not yaml", yaml: "::\n\t-", wantErr: "invalid configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, does not match ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("nicResource: {name: x, sharesPerNIC: 0}\ntrafficClasses: [NOPE]"))
	for _, want := range []string{"nicResource.name", "sharesPerNIC", "NOPE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want mention of %s", err, want)
		}
	}
}

func TestLoad(t *testing.T) {
	if c, err := Load(""); err != nil || c.NICResource.Name != "hpe.com/cxi" {
		t.Fatalf("Load(\"\") = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

func TestWatcherAppliesGoodAndRefusesBad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte("nicResource: {sharesPerNIC: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []Config
	reg := prometheus.NewRegistry()
	w, err := NewWatcher(path, nil, reg, func(c Config) {
		mu.Lock()
		applied = append(applied, c)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	w.notifyCh = make(chan struct{}, 64)
	w.readyCh = make(chan struct{})
	ctx := t.Context()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	waitFor(t, w.readyCh)
	waitReload := func(write func()) {
		t.Helper()
		write()
		waitFor(t, w.notifyCh)
	}
	writeFile := func(content string) func() {
		return func() {
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitReload(writeFile("nicResource: {sharesPerNIC: 3}\n"))
	mu.Lock()
	if len(applied) == 0 || applied[len(applied)-1].NICResource.SharesPerNIC != 3 {
		t.Fatalf("applied = %+v, want last sharesPerNIC 3", applied)
	}
	n := len(applied)
	mu.Unlock()

	waitReload(writeFile("nicResource: {sharesPerNIC: -1}\n"))
	mu.Lock()
	if len(applied) != n {
		t.Fatalf("a bad config was applied: %+v", applied[n:])
	}
	mu.Unlock()
	if got := testutil.ToFloat64(w.reloads.WithLabelValues("refused")); got < 1 {
		t.Fatalf("refused reloads = %v, want >= 1", got)
	}
}

// waitFor waits for ch to yield or close, failing the test after 10 s.
func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("nicResource: {name: hpe.com/cxi, sharesPerNIC: 4}\ntrafficClasses: [LOW_LATENCY]"))
	f.Add([]byte("gpu: {machineTypes: [{name: a, gpu: {type: amd, count: 1}}], nodePool: [{node: n, mode: ready, machineType: a}]}"))
	f.Add([]byte("limits: {TLEs: {max: 8, res: 8}}\ncleanup: {busyInterval: 1s}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		// A configuration that parsed must validate again unchanged.
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
	})
}

// Issue 15, item 10: UID 0 (or GID 0) as the fallback member of pods'
// services would give every root process of the node every pod's VNI; the
// configuration is refused with the reason.
func TestIssue15Item10FallbackRootRefused(t *testing.T) {
	tests := []struct {
		yaml, wantErr string
	}{
		{"membership: {fallbackUID: 0}", "membership.fallbackUID: 0 is root"},
		{"membership: {fallbackGID: 0}", "membership.fallbackGID: 0 is the root group"},
		{"membership: {fallbackUID: 1000}", ""},
		{"membership: {fallbackGID: 1000}", ""},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.yaml))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("Parse(%q): %v", tt.yaml, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want an ErrInvalid containing %q", tt.yaml, err, tt.wantErr)
		}
	}
}

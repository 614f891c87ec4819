package controller_test

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestItem7NamespaceCap (issue 15, item 7): one namespace holds at most
// MaxLeasesPerNamespace leases, whoever asks (the sync hook's owner
// acquire or an agent's pod acquire): past it an acquire fails with an
// error that names the namespace and the cap, which agents get as gRPC
// ResourceExhausted. Other namespaces, and the leases a namespace holds,
// are not affected; a freed lease makes room; a restarted controller
// counts what it loads. Before the cap, one namespace's forged syncs
// could drain the whole range.
func TestItem7NamespaceCap(t *testing.T) {
	const limit = 3
	path := filepath.Join(t.TempDir(), "c.db")
	jobs := controllertest.NewJobs()
	cfg := controller.Config{MaxLeasesPerNamespace: limit, Quarantine: -1}
	svc, stop := startAt(t, path, jobs, cfg)
	ctx := t.Context()
	for i := range limit {
		if _, err := svc.AcquireOwnerVNI(ctx, controllertest.Job("greedy", fmt.Sprint("j", i)), controller.Policy{}); err != nil {
			t.Fatalf("acquire %d of %d: %v", i+1, limit, err)
		}
	}
	full := func(t *testing.T, err error) {
		t.Helper()
		var ex *controller.ExhaustedError
		if !errors.As(err, &ex) || !errors.Is(err, controller.ErrNamespaceFull) || !errors.Is(err, controller.ErrExhausted) {
			t.Fatalf("acquire past the cap: %v; want an ExhaustedError wrapping ErrNamespaceFull", err)
		}
		if r := controller.Result(err); r != "namespace_full" {
			t.Fatalf("metrics label %q, want namespace_full", r)
		}
		if msg := err.Error(); !strings.Contains(msg, "namespace greedy") || !strings.Contains(msg, fmt.Sprint(limit)) {
			t.Fatalf("error %q does not name the namespace and the cap", msg)
		}
		if st := status.Convert(grpcapi.Status(err)); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "namespace greedy") {
			t.Fatalf("agents get %v %q; want ResourceExhausted naming the namespace", st.Code(), st.Message())
		}
	}
	extra := controllertest.Job("greedy", "extra")
	_, err := svc.AcquireOwnerVNI(ctx, extra, controller.Policy{})
	full(t, err)
	jobs.Add("extra-0", extra)
	_, err = svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: "greedy", Name: "extra-0"}, "n1")
	full(t, err)

	if _, err := svc.AcquireOwnerVNI(ctx, controllertest.Job("greedy", "j0"), controller.Policy{}); err != nil {
		t.Fatalf("re-acquire of a held lease at the cap: %v", err)
	}
	if _, err := svc.AcquireOwnerVNI(ctx, controllertest.Job("modest", "j0"), controller.Policy{}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
	if _, done, err := svc.FinalizeOwner(ctx, controllertest.Job("greedy", "j0"), true); err != nil || !done {
		t.Fatalf("finalize: %v %v", done, err)
	}
	if _, err := svc.AcquireOwnerVNI(ctx, extra, controller.Policy{}); err != nil {
		t.Fatalf("acquire after a lease was freed: %v", err)
	}

	stop()
	svc, _ = startAt(t, path, jobs, cfg)
	_, err = svc.AcquireOwnerVNI(ctx, controllertest.Job("greedy", "after-restart"), controller.Policy{})
	full(t, err)
}

func startAt(t *testing.T, path string, res controller.Resolver, cfg controller.Config) (*controller.Allocator, func()) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	return controllertest.Start(t, st, res, cfg)
}

func TestConfigRejectsNegativeNamespaceCap(t *testing.T) {
	if err := (controller.Config{MaxLeasesPerNamespace: -1}).Validate(); err == nil {
		t.Fatal("a negative cap validated")
	}
}

// The namespace cap's fill is exported per owner namespace, so that an
// alert warns before acquires fail with namespace_full; a freed lease
// lowers it, and without a cap there is nothing to fill.
func TestNamespaceLeaseFillMetric(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit int
		want  map[string]float64 // after acquiring 3 in "a" and 1 in "b", then freeing one of "a"
		freed map[string]float64
	}{
		{"cap 4", 4, map[string]float64{"a": 0.75, "b": 0.25}, map[string]float64{"a": 0.5, "b": 0.25}},
		{"no cap", 0, map[string]float64{}, map[string]float64{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			cfg := controller.Config{MaxLeasesPerNamespace: tt.limit, Quarantine: -1, Registerer: reg}
			svc, _ := startAt(t, filepath.Join(t.TempDir(), "c.db"), controllertest.NewJobs(), cfg)
			ctx := t.Context()
			for _, j := range []struct{ ns, name string }{{"a", "j0"}, {"a", "j1"}, {"a", "j2"}, {"b", "j0"}} {
				if _, err := svc.AcquireOwnerVNI(ctx, controllertest.Job(j.ns, j.name), controller.Policy{}); err != nil {
					t.Fatalf("acquire %s/%s: %v", j.ns, j.name, err)
				}
			}
			if got := namespaceFill(t, reg); !maps.Equal(got, tt.want) {
				t.Fatalf("fill %v, want %v", got, tt.want)
			}
			if _, done, err := svc.FinalizeOwner(ctx, controllertest.Job("a", "j0"), true); err != nil || !done {
				t.Fatalf("finalize: %v %v", done, err)
			}
			if got := namespaceFill(t, reg); !maps.Equal(got, tt.freed) {
				t.Fatalf("fill after a free %v, want %v", got, tt.freed)
			}
		})
	}
}

// namespaceFill reads slingshot_controller_namespace_lease_fill_ratio by
// owner namespace from reg.
func namespaceFill(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "slingshot_controller_namespace_lease_fill_ratio" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "owner_namespace" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return got
}

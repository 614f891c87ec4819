package controller_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

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

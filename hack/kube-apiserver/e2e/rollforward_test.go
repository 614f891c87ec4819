package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var errInjected = errors.New("injected fault: writer crashed")

// fault lets a budget of record writes through (POST, PUT and DELETE of
// leases, slices and quarantines), then fails every further one before it
// reaches the API server, as a writer that crashes in the middle of a
// batch. Journal writes fail instead when journal is set.
type fault struct {
	budget  atomic.Int64
	journal bool
	next    http.RoundTripper
}

func (f *fault) RoundTrip(req *http.Request) (*http.Response, error) {
	write := req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodDelete
	journal := strings.Contains(req.URL.Path, "/"+kube.JournalResource.Resource)
	if write && journal == f.journal && f.budget.Add(-1) < 0 {
		return nil, errInjected
	}
	return f.next.RoundTrip(req)
}

func faultyStore(t *testing.T, ns string, f *fault) *kube.Store {
	t.Helper()
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		f.next = rt
		return f
	}
	st, err := kube.New(cfg, kube.Options{Namespace: ns, Identity: "faulty", Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func leaseOps(n, base int) []store.Op {
	ops := make([]store.Op, 0, n)
	for i := range n {
		ops = append(ops, store.Put(lease(fmt.Sprintf("job/ns/%08d-0000-4000-8000-000000000000", base+i), uint16(1024+base+i), "node-a", "node-b"), 0))
	}
	return ops
}

// TestCrashMidBatchRollsForward: a writer that dies after the commit point,
// part way through its writes, leaves a batch the next Load completes in
// full; one that dies before it leaves nothing. Small batches sit in the
// head, large ones in part objects.
func TestCrashMidBatchRollsForward(t *testing.T) {
	tests := []struct {
		name    string
		leases  int
		budget  int64
		journal bool
		want    int
	}{
		{"inline journal, crash after 7 of 40 writes", 40, 7, false, 40},
		{"journal parts, crash after 100 of 2500 writes", 2500, 100, false, 2500},
		{"crash before the commit point", 40, 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			ns := newNamespace(t, "crash")
			f := &fault{journal: tt.journal}
			f.budget.Store(1 << 40)
			w := faultyStore(t, ns, f)
			if _, err := w.Load(ctx); err != nil {
				t.Fatal(err)
			}
			f.budget.Store(tt.budget)
			ops := append(leaseOps(tt.leases, 0), store.Put(&store.Meta{Key: "vni-cursor", Value: "1"}, 0))
			err := w.Commit(ctx, ops)
			if !errors.Is(err, errInjected) {
				t.Fatalf("commit: %v, want the injected fault", err)
			}
			if err := w.Commit(ctx, leaseOps(1, 60000)); !errors.Is(err, kube.ErrNeedsLoad) {
				t.Fatalf("commit after a failed one: %v, want ErrNeedsLoad", err)
			}
			// The next writer's first load fails too, part way through
			// rolling forward; the one after it completes the batch.
			f2 := &fault{}
			f2.budget.Store(3)
			if _, err := faultyStore(t, ns, f2).Load(ctx); tt.want > 3 && !errors.Is(err, errInjected) {
				t.Fatalf("load with a fault: %v, want the injected fault", err)
			}
			st, err := openKube(t, ns, "next").Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Leases) != tt.want {
				t.Fatalf("leases after the crash: %d, want %d", len(st.Leases), tt.want)
			}
			metas := len(st.Meta)
			if wantMeta := min(tt.want, 1); metas != wantMeta {
				t.Fatalf("meta records after the crash: %d, want %d", metas, wantMeta)
			}
			for _, l := range st.Leases {
				if len(l.Nodes) != 2 || l.Version != 1 {
					t.Fatalf("lease %s: %+v", l.Key, l)
				}
			}
			// Nothing of the journal is left but its head.
			list, err := dynamicClient(t).Resource(kube.JournalResource).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 {
				t.Fatalf("%d journal objects, want the head only", len(list.Items))
			}
		})
	}
}

func dynamicClient(t testing.TB) dynamic.Interface {
	t.Helper()
	dc, err := dynamic.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestKubectlColumns reads the store's objects as kubectl get does (the
// server-side Table form) and checks the printer columns, and that leases
// are selected by owner namespace with a field selector.
func TestKubectlColumns(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "kubectl")
	st, err := kube.New(srv.Config, kube.Options{Namespace: ns, Identity: "t",
		SliceRange: func(pool string, i int) string { return "2048-2111" }})
	if err != nil {
		t.Fatal(err)
	}
	uid := "6f1c2d4e-8a9b-4c3d-9e2f-1a2b3c4d5e6f"
	at := time.Now()
	ops := []store.Op{
		store.Put(&store.Lease{Key: "job/team-a/" + uid, VNI: 1042, Scope: store.ScopeJob, Nodes: []string{"n1", "n2"}, Created: at,
			Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "team-a", Name: "allreduce", UID: uid}}, 0),
		store.Put(&store.Lease{Key: "claim/team-b/ring", VNI: 1043, Scope: store.ScopeClaim, OwnerGone: true, Created: at,
			Owner: store.Owner{APIVersion: "slingshot.hpe.com/v1alpha1", Kind: "VNIClaim", Namespace: "team-b", Name: "ring"}}, 0),
		store.Put(&store.Slice{Pool: "pod-vni", Index: 0, Node: "n1", Expires: at.Add(time.Minute), Allocated: 3, Reported: at}, 0),
		store.Put(&store.Quarantine{VNI: 1041, Released: at}, 0),
	}
	if err := st.Commit(ctx, ops); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		resource, selector string
		want               map[string][]string // row name -> cells after NAME
	}{
		{"vnileases", "", map[string][]string{
			"vni-" + uid:            {"1042", "job", "team-a", "Job", "allreduce", "2", "false"},
			"vni-claim-team-b.ring": {"1043", "claim", "team-b", "VNIClaim", "ring", "0", "true"}}},
		{"vnileases", "spec.owner.namespace=team-b", map[string][]string{
			"vni-claim-team-b.ring": {"1043", "claim", "team-b", "VNIClaim", "ring", "0", "true"}}},
		{"nodeslices", "spec.node=n1", map[string][]string{"pod-vni-0": {"pod-vni", "0", "2048-2111", "n1", "3"}}},
		{"vniquarantines", "", map[string][]string{"vni-1041": {"1041"}}},
	}
	for _, tt := range tests {
		tbl := getTable(t, ns, tt.resource, tt.selector)
		got := map[string][]string{}
		for _, r := range tbl.Rows {
			var cells []string
			for i, c := range r.Cells {
				if tbl.ColumnDefinitions[i].Priority != 0 || tbl.ColumnDefinitions[i].Type == "date" {
					continue
				}
				b, _ := json.Marshal(c)
				cells = append(cells, strings.Trim(string(b), `"`))
			}
			got[cells[0]] = cells[1:]
		}
		for name, want := range tt.want {
			if g := got[name]; strings.Join(g, " ") != strings.Join(want, " ") {
				t.Errorf("kubectl get %s --field-selector %q: row %s = %v, want %v", tt.resource, tt.selector, name, g, want)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("kubectl get %s --field-selector %q: %d rows, want %d", tt.resource, tt.selector, len(got), len(tt.want))
		}
	}
	var cols []string
	for _, c := range getTable(t, ns, "vnileases", "").ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	t.Logf("kubectl get vnileases -o wide columns: %s", strings.Join(cols, " "))
}

func getTable(t *testing.T, ns, resource, selector string) *metav1.Table {
	t.Helper()
	cfg := rest.CopyConfig(srv.Config)
	cfg.NegotiatedSerializer = tableCodecs()
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := rc.Get().AbsPath("/apis/slingshot.hpe.com/v1alpha1/namespaces/"+ns+"/"+resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if selector != "" {
		req = req.Param("fieldSelector", selector)
	}
	raw, err := req.DoRaw(t.Context())
	if err != nil {
		t.Fatalf("table of %s: %v", resource, err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatal(err)
	}
	return &tbl
}

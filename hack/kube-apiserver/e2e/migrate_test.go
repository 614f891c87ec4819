package e2e

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/controllertest"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// TestMigrateSQLiteToKube: a controller on sqlite leases VNIs and slices;
// its store is exported, imported into the Kubernetes store, and a
// controller started on that holds the same leases and continues the
// next-fit cursor; the way back works as well.
func TestMigrateSQLiteToKube(t *testing.T) {
	ctx := t.Context()
	b := backends()
	sqliteStore := b[0].open(t)
	res := controllertest.NewJobs()
	cfg := controller.Config{PodVNIRange: vnialloc.Range{Min: 60000, Max: 60127}, PodVNISliceSize: 64, SweepInterval: time.Hour}
	svc := runService(t, sqliteStore, res, cfg)
	want := map[string]uint16{}
	for i := range 20 {
		owner := jobOwner(i, 0)
		res.Add(owner.Name+"-0", owner)
		l, err := svc.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: owner.Name + "-0", UID: "p"}, "node-1")
		if err != nil {
			t.Fatal(err)
		}
		want[l.Key] = l.VNI
	}
	if _, err := svc.AcquireSlices(ctx, "node-1", "pod-vni", 2); err != nil {
		t.Fatal(err)
	}
	var doc bytes.Buffer
	if err := store.Export(ctx, sqliteStore, &doc); err != nil {
		t.Fatal(err)
	}
	kubeStore := openKube(t, newNamespace(t, "migrate"), "import")
	r, err := store.Import(ctx, kubeStore, bytes.NewReader(doc.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %d records (%d bytes of JSON)", r.Written, doc.Len())
	k := runService(t, kubeStore, res, cfg)
	leases, _, err := k.ListLeases()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint16{}
	for _, l := range leases {
		got[l.Key] = l.VNI
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("leases on the kube store (-want +got):\n%s", d)
	}
	slices, _, _ := k.ListSlices("pod-vni", "node-1")
	if len(slices) != 2 {
		t.Fatalf("node-1 holds %d slices on the kube store, want 2", len(slices))
	}
	// Next-fit continues where the sqlite controller stopped.
	owner := jobOwner(99, 0)
	res.Add(owner.Name+"-0", owner)
	l, err := k.AcquireJobVNI(ctx, controller.PodRef{Namespace: owner.Namespace, Name: owner.Name + "-0", UID: "p"}, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	maxVNI := uint16(0)
	for _, v := range want {
		maxVNI = max(maxVNI, v)
	}
	if l.VNI != maxVNI+1 {
		t.Errorf("first vni on the kube store %d, want %d (next-fit after %d)", l.VNI, maxVNI+1, maxVNI)
	}
}

package kube

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"k8s.io/client-go/rest"
)

func testStore(t testing.TB) *Store {
	t.Helper()
	s, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{Namespace: "slingshot", SliceRange: func(pool string, i int) string { return "r" }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestObjectRoundTrip encodes each record kind as its object, through the
// dynamic client's unstructured form, and back.
func TestObjectRoundTrip(t *testing.T) {
	s := testStore(t)
	at := time.UnixMilli(1_700_000_000_123)
	l := store.Lease{Key: "job/ns/u1", VNI: 1500, Scope: store.ScopeJob, Nodes: []string{"n1", "n2"}, OwnerGone: true, Created: at, HWCollJob: "k8s-u1", Version: 7,
		Owner: store.Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ns", Name: "train", UID: "u1"}}
	lo := s.leaseObject(&l, LeaseName(l.Key), 7, "")
	var lback leaseObject
	roundTrip(t, lo, &lback)
	if lback.Status.NodeCount != 2 || lback.Namespace != "slingshot" || lback.Kind != "VNILease" {
		t.Fatalf("lease object: %+v", lback)
	}
	gotL, err := decodeLease(&lback)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(l, gotL); d != "" {
		t.Fatalf("lease (-want +got):\n%s", d)
	}

	sl := store.Slice{Pool: "hsn0", Index: 4, Node: "node-1", Expires: at, Allocated: 3, Reported: at.Add(-time.Second), Open: true, Version: 2}
	var sback sliceObject
	roundTrip(t, s.sliceObject(&sl, 2, "17"), &sback)
	if sback.Spec.Range != "r" || sback.Name != "hsn0-4" || sback.ResourceVersion != "17" {
		t.Fatalf("slice object: %+v", sback)
	}
	gotS, err := decodeSlice(&sback)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(sl, gotS); d != "" {
		t.Fatalf("slice (-want +got):\n%s", d)
	}

	q := store.Quarantine{VNI: 1499, Released: at, Version: 1}
	var qback quarantineObject
	roundTrip(t, s.quarantineObject(&q, 1, ""), &qback)
	gotQ, err := decodeQuarantine(&qback)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(q, gotQ); d != "" {
		t.Fatalf("quarantine (-want +got):\n%s", d)
	}
}

func roundTrip(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeJSON(b, out); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRefusesBadObjects(t *testing.T) {
	s := testStore(t)
	good := store.Lease{Key: "job/ns/u1", VNI: 1500, Scope: store.ScopeJob}
	tests := []struct {
		name   string
		mutate func(o *leaseObject)
	}{
		{"no version", func(o *leaseObject) { delete(o.Annotations, AnnotationVersion) }},
		{"version 0", func(o *leaseObject) { o.Annotations[AnnotationVersion] = "0" }},
		{"bad version", func(o *leaseObject) { o.Annotations[AnnotationVersion] = "x" }},
		{"no key", func(o *leaseObject) { o.Spec.LeaseKey = "" }},
		{"vni 0", func(o *leaseObject) { o.Spec.VNI = 0 }},
		{"bad time", func(o *leaseObject) { o.Spec.Created = "yesterday" }},
	}
	for _, tt := range tests {
		o := s.leaseObject(&good, "vni-u1", 1, "")
		tt.mutate(o)
		if _, err := decodeLease(o); !errors.Is(err, ErrBadObject) {
			t.Errorf("%s: err = %v, want ErrBadObject", tt.name, err)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, o := range []Options{{}, {Namespace: "Bad_NS"}, {Namespace: "ok", Name: "no/slash"}} {
		if _, err := New(cfg, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	s, err := New(cfg, Options{Namespace: "slingshot"})
	if err != nil || s.opts.Name != "slingshot-controller" || s.opts.Parallel != 32 {
		t.Fatalf("defaults: %+v, %v", s.opts, err)
	}
}

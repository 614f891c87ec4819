package controller

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
)

// Issue 17: the pod's network request annotation reaches the node in every
// AcquireJobVNI answer, whatever the pod's VNI scope, read anew each time
// and never stored with the lease.
func TestNetworkRequestPassedThrough(t *testing.T) {
	h := newHarness(t, Config{PodVNIRange: vnialloc.Range{Min: 2048, Max: 2175}, PodVNISliceSize: 64})
	ctx := t.Context()
	const req = `{"pool":"hsn0","ip":"10.150.3.7"}`
	h.res.addPod("a", "worker-0", job("a", "train"), "")
	h.res.addPod("a", "worker-1", job("a", "train"), "")
	h.res.addPod("a", "bare", nil, "")
	h.res.addPod("a", "optout", job("a", "other"), "none")
	for _, tc := range []struct {
		pod, request string
	}{
		{"worker-0", req},
		{"worker-1", ""}, // same job, no request: nothing carried over
		{"bare", "hsn0"},
		{"optout", "not even json"},
	} {
		h.res.setNetwork("a", tc.pod, tc.request)
		for range 2 { // the first answer leases, the second finds the lease
			l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: tc.pod}, "n1")
			if err != nil || l.NetworkRequest != tc.request {
				t.Fatalf("%s: %+v %v; want network request %q", tc.pod, l, err, tc.request)
			}
		}
	}
	// Changed on the pod, changed in the answer: it is never cached.
	h.res.setNetwork("a", "worker-0", "hsn1")
	if l, err := h.svc.AcquireJobVNI(ctx, PodRef{Namespace: "a", Name: "worker-0"}, "n2"); err != nil || l.NetworkRequest != "hsn1" {
		t.Fatalf("after the annotation changed: %+v %v", l, err)
	}
	leases, _, err := h.svc.ListLeases()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.NetworkRequest != "" {
			t.Fatalf("listed lease carries a network request: %+v", l)
		}
	}
}

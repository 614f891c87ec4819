package dra

import (
	"context"
	"testing"
)

// A Job's claims on the node share one controller call when the pods'
// labels name the Job (issue 25: one call per node per job); a pod whose
// labels are not known yet, or a claim asking for its pod's own VNI,
// calls the controller itself.
func TestJobClaimsShareOneControllerCall(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	jobOf := map[string]string{"uid-train-0": "job-uid-1", "uid-train-1": "job-uid-1", "uid-train-2": "job-uid-1"}
	r.cfg.PodMeta = func(namespace, name, uid string) (map[string]string, map[string]string, bool) {
		job, ok := jobOf[uid]
		if !ok {
			return nil, nil, false
		}
		return map[string]string{"batch.kubernetes.io/controller-uid": job}, nil, true
	}
	r.restart()
	vniOf := func(uid, pod, config string) uint16 {
		t.Helper()
		if _, err := r.m.Prepare(ctx, claim(uid, pod, config, "cxi0")); err != nil {
			t.Fatal(err)
		}
		rec, ok := r.get(uid)
		if !ok || rec.VNI == 0 {
			t.Fatalf("claim %s: no VNI recorded", uid)
		}
		return rec.VNI
	}
	first := vniOf("c0", "train-0", "")
	if second := vniOf("c1", "train-1", ""); second != first {
		t.Fatalf("claims of one Job on VNIs %d and %d", first, second)
	}
	if r.leaser.acquires != 1 {
		t.Fatalf("%d controller calls for two claims of one Job, want 1", r.leaser.acquires)
	}
	// A pod-scoped claim of the same Job is the controller's to answer.
	vniOf("c2", "train-2", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"pod"}`)
	// Labels unknown: no sharing, the controller answers (the same VNI).
	if v := vniOf("c3", "train-3", ""); v != first {
		t.Fatalf("claim of a pod of unknown labels on VNI %d, want the job's %d", v, first)
	}
	if r.leaser.acquires != 3 {
		t.Fatalf("%d controller calls, want 3: one shared, the pod-scoped claim's and the unknown pod's", r.leaser.acquires)
	}
}

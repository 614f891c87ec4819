package engine

import "testing"

// A release that crosses an acquire of the same lease: the acquire learns
// that its hold may have been undone.
func TestLeaseHoldsCrossingRelease(t *testing.T) {
	h := newLeaseHolds()
	h.restore("job/ns/j", "ns/a")
	since := h.begin() // pod b's acquire begins
	if !h.drop("job/ns/j", "ns/a") {
		t.Fatal("the only holder's drop is not the last")
	}
	added := make(chan bool)
	go func() { added <- h.add("job/ns/j", "ns/b", since) }()
	h.done("job/ns/j") // the release is answered
	if <-added {
		t.Fatal("an acquire that began before a release of its lease was taken as fresh")
	}
	if h.count("job/ns/j") != 1 {
		t.Fatalf("holders = %d, want pod b", h.count("job/ns/j"))
	}
	// Now b holds it: a's second drop (a retry) is not the last.
	if h.drop("job/ns/j", "ns/a") {
		t.Fatal("a drop by a pod that no longer holds the lease released it under pod b")
	}
	// An acquire after the release is fresh.
	since = h.begin()
	if !h.add("job/ns/j", "ns/c", since) {
		t.Fatal("an acquire after every release was taken as crossed")
	}
}

// The table forgets leases nobody holds once no acquire may need them.
func TestLeaseHoldsForgetIdleLeases(t *testing.T) {
	h := newLeaseHolds()
	since := h.begin()
	if !h.add("job/ns/j", "ns/a", since) {
		t.Fatal("first acquire not fresh")
	}
	if !h.drop("job/ns/j", "ns/a") {
		t.Fatal("last holder's drop not last")
	}
	h.done("job/ns/j")
	failed := h.begin()
	h.abandon(failed)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.leases) != 0 || len(h.pending) != 0 {
		t.Fatalf("leases %v, pending %v: want both empty", h.leases, h.pending)
	}
}

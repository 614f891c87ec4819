package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/leader"
)

// term is one replica's time as leader.
type term struct {
	id         string
	start, end time.Time
}

// TestLeaderHandover: two electors on one Lease; the leader is stopped
// (its context ends, as on SIGTERM); the other leads within a few retry
// periods, and only after the first one's work has returned: terms never
// overlap.
func TestLeaderHandover(t *testing.T) {
	ns := newNamespace(t, "leader")
	var mu sync.Mutex
	var terms []term
	started := make(chan string, 4)
	run := func(ctx context.Context, id string) <-chan error {
		e, err := leader.New(kubeClient(t).CoordinationV1(), leader.Config{Namespace: ns, Name: "ctl", Identity: id,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(ctx context.Context) error {
				tm := term{id: id, start: time.Now()}
				started <- id
				<-ctx.Done()
				// Work that takes a while to stop, as a commit in flight.
				stop := time.NewTimer(300 * time.Millisecond)
				<-stop.C
				tm.end = time.Now()
				mu.Lock()
				terms = append(terms, tm)
				mu.Unlock()
				return nil
			})
		}()
		return done
	}
	ctxA, stopA := context.WithCancel(t.Context())
	defer stopA()
	doneA := run(ctxA, "a")
	first := waitFor(t, started, 30*time.Second)
	if first != "a" {
		t.Fatalf("%s leads before b runs", first)
	}
	ctxB, stopB := context.WithCancel(t.Context())
	defer stopB()
	doneB := run(ctxB, "b")
	stopped := time.Now()
	stopA()
	if err := waitFor(t, doneA, 30*time.Second); err != nil {
		t.Fatalf("a: %v", err)
	}
	if id := waitFor(t, started, 30*time.Second); id != "b" {
		t.Fatalf("%s leads after a stopped", id)
	}
	handover := time.Since(stopped)
	stopB()
	if err := waitFor(t, doneB, 30*time.Second); err != nil {
		t.Fatalf("b: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(terms) != 2 || terms[0].id != "a" || terms[1].id != "b" {
		t.Fatalf("terms %+v, want a then b", terms)
	}
	if !terms[1].start.After(terms[0].end) {
		t.Fatalf("b started leading at %v, before a stopped at %v", terms[1].start, terms[0].end)
	}
	if handover > 3*time.Second {
		t.Errorf("handover took %v after a clean stop, want about one retry period after a's work returned", handover)
	}
	t.Logf("clean handover in %v (a's work took 300ms to stop)", handover.Round(time.Millisecond))
}

func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("nothing within %v", d)
	}
	var zero T
	return zero
}

package devplugin

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/event"
)

// TestPreStartRefusalEvent: a refused bind is told on its pod, with the
// cause; a bind that succeeds tells nothing.
func TestPreStartRefusalEvent(t *testing.T) {
	tests := []struct {
		name     string
		netns    fakeNetns
		leaseErr error
		want     string // a part of the event's text; "" for no event
	}{
		{"bound", fakeNetns{"uid-a": 4026532001}, nil, ""},
		{"no network namespace", fakeNetns{}, nil, "no service member for the pod"},
		{"the controller refuses", fakeNetns{"uid-a": 4026532001}, errors.New("VNI range exhausted"), "VNI range exhausted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, t.TempDir(), nil, tt.netns)
			r.leaser.failNext = tt.leaseErr
			r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
			err := r.b.PreStart(t.Context(), res, []string{dev0})
			got := r.events.Of(event.BindRefused)
			if tt.want == "" {
				if err != nil || len(got) != 0 {
					t.Fatalf("PreStart = %v, events %+v; want a bind and no event", err, got)
				}
				return
			}
			if err == nil || len(got) != 1 {
				t.Fatalf("PreStart = %v, %d events; want a refusal told once", err, len(got))
			}
			if got[0].Obj != event.Pod("ns", "a", "uid-a") || !strings.Contains(got[0].What, tt.want) || !strings.Contains(got[0].What, "Container main") {
				t.Errorf("event %+v, want one on pod ns/a naming the container and %q", got[0], tt.want)
			}
		})
	}
}

// TestCleanupStuckAndReleaseEvents: a gone pod's busy service is pending,
// dated from when its cleanup began, with its VNI still held; once the
// service is destroyed a release the controller refuses is told on the
// pod and the record kept, and the next pass finishes.
func TestCleanupStuckAndReleaseEvents(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	id := r.record(t, "ns/a").Services[0].ID
	if err := r.sims["cxi0"].SetInUse(id, 1); err != nil {
		t.Fatal(err)
	}
	if p := r.b.eng.Pending(); len(p) != 0 {
		t.Fatalf("a live pod's services pending destruction: %+v", p)
	}
	r.pods.set()
	var wg sync.WaitGroup
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	p := r.b.eng.Pending()
	exited := r.record(t, "ns/a").Exited
	if len(p) != 1 || p[0].ID() != "ns/a" || exited == nil || p[0].Exited == nil || !p[0].Exited.Equal(*exited) ||
		len(p[0].Services) != 1 || p[0].UID != "uid-a" {
		t.Fatalf("pending %+v, want pod ns/a's service since its exit %v", p, exited)
	}
	if len(r.leaser.released) != 0 {
		t.Fatal("VNI released while its service is busy")
	}

	if err := r.sims["cxi0"].SetInUse(id, 0); err != nil {
		t.Fatal(err)
	}
	r.leaser.failRelease = errors.New("controller unreachable after 5 attempts")
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if len(r.b.eng.Pending()) != 0 {
		t.Fatal("a destroyed service still pending")
	}
	ev := r.events.Of(event.LeaseReleaseFailed)
	if len(ev) != 1 || ev[0].Obj != event.Pod("ns", "a", "uid-a") || !strings.Contains(ev[0].What, "controller unreachable") {
		t.Fatalf("release events %+v, want one on pod ns/a with the cause", ev)
	}
	if !r.has("ns/a") {
		t.Fatal("the record of an unreleased lease was dropped")
	}
	r.leaser.failRelease = nil
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if r.has("ns/a") || len(r.leaser.released) != 1 {
		t.Fatal("the release was not retried")
	}
}

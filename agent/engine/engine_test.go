package engine

import (
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

// A crash between a bind's record (written first) and the driver's bind
// leaves services recorded as admitting the namespace that admit nobody.
// The next bind to that namespace binds them: it does not trust its own
// record over the driver.
func TestBindFinishesABindTheRecordNamesButTheDriverLacks(t *testing.T) {
	w := newEngineWorld(t, 1)
	ctx := t.Context()
	h := checkpoint.Holder{Kind: checkpoint.KindPod, UID: "uid-a", Namespace: "ns", Name: "j0-a", DeviceIDs: map[string][]string{}}
	id := h.ID()
	if _, err := w.e.Admit(ctx, h, controllerclient.PodRef{Namespace: "ns", Name: "j0-a", UID: "uid-a"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := w.e.Ensure(ctx, id, []string{"cxi0", "cxi1"}, nil); err != nil {
		t.Fatal(err)
	}
	ino := w.k.create()
	// The record as the crashed bind wrote it.
	if _, err := w.e.Update(id, func(r *checkpoint.Holder) {
		r.Netns = ino
		for i := range r.Services {
			r.Services[i].Netns = ino
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.e.Check(ctx, id, []string{"cxi0", "cxi1"}, ino); err == nil {
		t.Fatal("services that admit nobody passed the container check")
	}
	ns, err := w.k.open(ino)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.e.Bind(ctx, id, ns, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.e.Check(ctx, id, []string{"cxi0", "cxi1"}, ino); err != nil {
		t.Fatalf("after the bind: %v", err)
	}
	if held := w.e.Namespaces().Held(id); held != ino {
		t.Fatalf("namespace %d held, want %d", held, ino)
	}
}

package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// TestDefaultServiceEvents: the node is told when a NIC's default service
// opens, once however many checks find it open, and when it closes again.
func TestDefaultServiceEvents(t *testing.T) {
	r := newSimRig(t, t.TempDir())
	g := newDefaultServiceGuard(r.nics, r.m, testLoggerDiscard(), false)
	g.events, g.node = r.events, "n1"
	g.check(t.Context())
	if n := len(r.events.All()); n != 0 {
		t.Fatalf("%d events while every default service is closed", n)
	}
	r.enableDefault(t, "cxi1", true)
	g.check(t.Context())
	g.check(t.Context())
	open := r.events.Of(event.DefaultServiceOpen)
	if len(open) != 1 || open[0].Obj != event.Node("n1") || !strings.Contains(open[0].What, "cxi1") {
		t.Fatalf("open events %+v, want one on node n1 naming cxi1", open)
	}
	r.enableDefault(t, "cxi1", false)
	g.check(t.Context())
	if shut := r.events.Of(event.DefaultServiceShut); len(shut) != 1 || !strings.Contains(shut[0].What, "cxi1") {
		t.Fatalf("closed events %+v, want one naming cxi1", shut)
	}
}

// TestIPSliceLostEvent: a slice the controller no longer leases the node
// is told on the node when addresses of it are in use here, with how
// many; an empty or unknown one is not.
func TestIPSliceLostEvent(t *testing.T) {
	h := newIPSController(t, "hsn0=10.150.0.0/22:/24")
	n := h.newNode(t, "node-a", 1)
	if _, err := n.allocate(t.Context(), "x", netreq.Request{}); err != nil {
		t.Fatal(err)
	}
	used := -1
	for i := range n.slices("hsn0") {
		used = i
	}
	ev := &eventtest.Recorder{}
	holder := sliceHolder{a: n.alloc, events: ev, node: "node-a"}
	holder.SlicesHeld(nil, []controllerclient.SliceReport{
		{Pool: "hsn0", Index: used, Allocated: 1, Open: true},
		{Pool: "hsn0", Index: (used + 1) % 4}, // not the node's
	})
	got := ev.Of(event.IPSliceLost)
	want := fmt.Sprintf("slice %d of IP pool hsn0", used)
	if len(got) != 1 || got[0].Obj != event.Node("node-a") || !strings.Contains(got[0].What, want) || !strings.Contains(got[0].What, "1 addresses") {
		t.Fatalf("events %+v, want one on node-a naming %q and its 1 address", got, want)
	}
}

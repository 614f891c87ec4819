package hooks

import (
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller"
)

// TestItem7NamespaceCapSync (issue 15, item 7): once a namespace holds
// as many leases as the controller allows it, /sync answers 200 with the
// vni-error annotation naming the namespace and the cap, asks to be
// called again later, and attaches no VNI. Before the cap, every sync
// leased one more VNI.
func TestItem7NamespaceCapSync(t *testing.T) {
	svc := newService(t, true, controller.Config{MaxLeasesPerNamespace: 2})
	h := New(svc, nil, followed, nil, nil)
	for _, uid := range []string{"u-a", "u-b"} {
		if _, resp, _ := call(t, h, "/sync", &Request{Object: jobObject("j"+uid, uid, nil)}); resp == nil || len(resp.Attachments) != 1 {
			t.Fatalf("sync %s under the cap: %+v", uid, resp)
		}
	}
	code, resp, _ := call(t, h, "/sync", &Request{Object: jobObject("jc", "u-c", nil)})
	if code != 200 || resp == nil {
		t.Fatalf("sync past the cap: code %d", code)
	}
	msg := resp.Annotations[AnnotationError]
	if msg == nil || !strings.Contains(*msg, "namespace ml") || !strings.Contains(*msg, "2") {
		t.Fatalf("vni-error %v; want one naming namespace ml and the cap 2", msg)
	}
	if len(resp.Attachments) != 0 || resp.ResyncAfterSeconds != resyncFullSeconds {
		t.Fatalf("past the cap: attachments %+v, resync %v", resp.Attachments, resp.ResyncAfterSeconds)
	}
	if leases, _, _ := svc.ListLeases(); len(leases) != 2 {
		t.Fatalf("%d leases, want 2", len(leases))
	}
}

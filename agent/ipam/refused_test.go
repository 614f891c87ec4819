package ipam_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// TestRefusedHook: an address the CNI plugin asks for and does not get is
// told to Options.Refused with the pod the runtime named (the agent writes
// it on the pod); an answered request tells nothing.
func TestRefusedHook(t *testing.T) {
	type refusal struct {
		pod ipamwire.Pod
		err error
	}
	var got []refusal
	a, err := ipam.New(ipam.Options{StatePath: filepath.Join(t.TempDir(), "ipam.json"), Slicer: ipamtest.NewController().Node("n1"),
		Refused: func(pod ipamwire.Pod, err error) { got = append(got, refusal{pod, err}) }})
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler()
	post := func(req ipamwire.AddRequest) int {
		b, _ := json.Marshal(req)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, ipamwire.PathAdd, bytes.NewReader(b)))
		return w.Code
	}
	pod := ipamwire.Pod{Namespace: "ns", Name: "p", UID: "u1"}
	code := post(ipamwire.AddRequest{Network: "hsn", Attachment: ipamwire.Attachment{ContainerID: "c1", IfName: "net1"}, Pool: "no-such-pool", Pod: pod})
	if code == http.StatusOK || len(got) != 1 || got[0].pod != pod || got[0].err == nil {
		t.Fatalf("refused request: HTTP %d, hook told %+v; want one refusal of pod ns/p with its error", code, got)
	}
	// A malformed attachment is the plugin's error, not the pool's: no
	// address was asked for.
	if code := post(ipamwire.AddRequest{Network: "hsn", Pool: "hsn0", Pod: pod}); code == http.StatusOK || len(got) != 1 {
		t.Fatalf("bad attachment: HTTP %d, hook told %d times; want a refusal the hook does not hear of", code, len(got))
	}
}

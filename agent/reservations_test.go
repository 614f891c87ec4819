package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// TestReservationsShown: inspect and the metrics show what each NIC's
// services reserve, a TLE-reserving pod's pool among them, and which pod
// holds each service.
func TestReservationsShown(t *testing.T) {
	c, err := config.Parse([]byte(`
jobOptions:
  trafficClasses:
    namespaces: {hpc: [BULK_DATA]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newSimRig(t, t.TempDir())
	r.defaults = policyFrom(c).defaults
	req, err := jobreq.Parse(`{"depth":4,"resources":{"TLEs":{"res":8}}}`)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := jobpolicy.New(c).Resolve("hpc", req)
	if err != nil {
		t.Fatal(err)
	}
	// The pod's service, made as either front end has the engine make it.
	ctx := t.Context()
	pod := checkpoint.Holder{Kind: checkpoint.KindPod, UID: "uid-a", Namespace: "hpc", Name: "a", DeviceIDs: map[string][]string{}, Options: opts}
	if _, err := r.eng.Admit(ctx, pod, controllerclient.PodRef{Namespace: "hpc", Name: "a", UID: "uid-a"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Ensure(ctx, "hpc/a", []string{"cxi0"}, &cxi.Member{Type: cxi.MemberUID, ID: 1000}); err != nil {
		t.Fatal(err)
	}
	a := &parts{opts: Options{NodeName: "n1"}, inv: newInventory(nil), eng: r.eng, nics: r.nics}
	rep := a.commonReport(ctx, true)
	got := map[string]inspect.Reservation{}
	for _, rv := range rep.Reservations {
		got[rv.NIC+" "+rv.Resource] = rv
	}
	for key, want := range map[string]inspect.Reservation{
		"cxi0 TLE pools": {NIC: "cxi0", Resource: "TLE pools", Max: 4, Reserved: 2, Free: 2},
		"cxi1 TLE pools": {NIC: "cxi1", Resource: "TLE pools", Max: 4, Reserved: 1, Free: 3},
		"cxi0 TLEs":      {NIC: "cxi0", Resource: "TLEs", Max: 2048, Reserved: 512 + 8, Free: 2048 - 520},
	} {
		if got[key] != want {
			t.Errorf("%s = %+v, want %+v", key, got[key], want)
		}
	}
	if rv := got["cxi0 LEs"]; rv.Reserved < 16*4 {
		t.Errorf("cxi0 LEs reserved %d, want at least the pod's 4 times 16", rv.Reserved)
	}
	for _, s := range rep.Services {
		if s.Pod == "hpc/a" && (s.NIC != "cxi0" || s.TCs != "0xa" || s.Reserved["LEs"] != 64 || s.Reserved["TLEs"] != 8) {
			t.Errorf("inspect service of hpc/a = %+v, want on cxi0 with classes 0xa, 64 LEs and 8 TLEs reserved", s)
		}
	}
	var table strings.Builder
	if err := inspect.WriteTable(&table, rep); err != nil || !strings.Contains(table.String(), "TLE pools") {
		t.Fatalf("table lacks the reservations (%v):\n%s", err, table.String())
	}

	observeReservations(ctx, r.m, r.nics["cxi0"])
	if v := testutil.ToFloat64(r.m.nicReserved.WithLabelValues("cxi0", "TLE pools")); v != 2 {
		t.Fatalf("slingshot_agent_nic_reserved{cxi0, TLE pools} = %v, want 2", v)
	}
	if v := testutil.ToFloat64(r.m.nicFree.WithLabelValues("cxi0", "TLE pools")); v != 2 {
		t.Fatalf("slingshot_agent_nic_free{cxi0, TLE pools} = %v, want 2", v)
	}
}

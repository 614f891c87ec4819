package inspect

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *Report {
	return &Report{
		Node: "n1", Ready: true, Generated: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC),
		NICs: []NIC{
			{Name: "cxi0", PCIAddress: "0000:21:00.0", NetDev: "hsn2", NUMANode: 0, Link: true, SpeedMbps: 200000, Healthy: true, Allocated: 1, Shares: 1},
			{Name: "cxi1", PCIAddress: "0000:41:00.0", NUMANode: 1, Healthy: false, Reason: "link down", Shares: 1},
		},
		Services: []Service{
			{NIC: "cxi0", ID: 1, System: false, VNIs: []uint16{1, 10}, Members: []string{"all"}},
			{NIC: "cxi0", ID: 2, Enabled: true, VNIs: []uint16{1024}, Members: []string{"netns=4026532000"}, Pod: "ns/a"},
		},
		Pods:       []Pod{{Namespace: "ns", Name: "a", UID: "u1", VNI: 1024, Scope: "job", NICs: []string{"cxi0"}, State: "running"}},
		Units:      []Unit{{MachineType: "compute-xlarge", ID: "u0", GPUs: []string{"0000:17:00.0"}, NICs: []string{"cxi0"}, Healthy: true}},
		PodVNIPool: &Pool{Free: 60, Total: 64},
	}
}

func TestFetchRoundTrip(t *testing.T) {
	want := sample()
	srv := httptest.NewServer(Handler(func(context.Context) *Report { return want }))
	defer srv.Close()
	got, err := Fetch(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Fetch = %+v, want %+v", got, want)
	}
}

func TestFetchErrors(t *testing.T) {
	if _, err := Fetch(t.Context(), "http://127.0.0.1:1"); err == nil {
		t.Fatal("Fetch from a closed port succeeded")
	}
	mux := http.NewServeMux()
	mux.Handle(Path, Handler(func(context.Context) *Report { return sample() }))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := Fetch(t.Context(), srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Fetch of a bad path = %v, want a 404 error", err)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, sample()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Node n1 (ready)",
		"cxi0  0000:21:00.0  hsn2",
		"unhealthy: link down",
		"netns=4026532000",
		"ns/a",
		"200G",
		"compute-xlarge",
		"60 free of 64",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

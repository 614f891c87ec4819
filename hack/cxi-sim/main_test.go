package main

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	s, err := sim.Open(dir, "cxi1", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	desc := uapi.SvcDesc{RestrictedMembers: true, RestrictedVNIs: true, NumVldVNIs: 1}
	desc.Members[0] = uapi.SvcMember{Type: uapi.MemberUID, ID: 1000}
	desc.VNIs[0] = 1024
	id, _, err := uapi.NewDevice(s).AllocService(desc)
	if err != nil {
		t.Fatal(err)
	}

	var out, errOut strings.Builder
	// A booted node's NIC has the default service (1) and cxi_eth's
	// Ethernet service (2); the first one made after them is 3.
	if id != 3 {
		t.Fatalf("first user service %d, want 3", id)
	}
	if err := run([]string{"--state", dir, "--device", "cxi1", "in-use", "3", "3"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != "service 3 on cxi1: 3 LNIs\n" {
		t.Fatalf("in-use printed %q", out.String())
	}
	if err := uapi.NewDevice(s).DestroyService(id); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy after in-use: %v, want EBUSY", err)
	}
	out.Reset()
	if err := run([]string{"--state", dir, "--device", "cxi1", "list"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Resources\n", "ID: 1\n  Name:default\n", "ID: 2\n  Name:ethernet-svc\n  State:Enabled\n",
		"ID: 3\n  Name:user\n  State:Enabled\n", "type:uid uid/gid:1000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, out.String())
		}
	}

	// enable 1 is `cxi_service enable -s 1`: the default service opens.
	out.Reset()
	if err := run([]string{"--state", dir, "--device", "cxi1", "enable", "1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if d, err := uapi.NewDevice(s).GetService(1); err != nil || !d.Enable || out.String() != "service 1 on cxi1: enabled\n" {
		t.Fatalf("after enable 1: %+v, %v, printed %q", d, err, out.String())
	}
	if err := run([]string{"--state", dir, "--device", "cxi1", "disable", "1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if d, err := uapi.NewDevice(s).GetService(1); err != nil || d.Enable {
		t.Fatalf("after disable 1: %+v, %v", d, err)
	}

	for _, bad := range [][]string{
		{"list"},
		{"--state", dir},
		{"--state", dir, "frob"},
		{"--state", dir, "list", "x"},
		{"--state", dir, "in-use", "3"},
		{"--state", dir, "in-use", "x", "1"},
		{"--state", dir, "in-use", "3", "x"},
		{"--state", dir, "in-use", "99", "1"},
		{"--state", dir, "enable"},
		{"--state", dir, "enable", "x"},
		{"--state", dir, "disable", "99"},
		{"--state", dir, "disable", "2"}, // the Ethernet service holds an LNI: EBUSY
	} {
		if err := run(bad, &out, &errOut); err == nil {
			t.Errorf("run(%q) succeeded", bad)
		}
	}
}

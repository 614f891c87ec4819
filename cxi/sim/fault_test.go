package sim

import (
	"strings"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func TestFaultFiresCountTimesAndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s, dev := open(t, dir, Options{NoSync: true})
	id := mustAlloc(t, dev, podDesc(100))
	wantErrno(t, "disable", dev.EnableService(id, false), 0)

	if err := s.InjectFault(Fault{Op: uapi.OpSvcEnable, Errno: syscall.ENOSPC, Count: 2}); err != nil {
		t.Fatal(err)
	}
	// Disabling is not what the fault targets.
	wantErrno(t, "disable under an enable fault", dev.EnableService(id, false), 0)

	// Another Device on the same state, as another process would open it,
	// meets the fault too.
	other, err := Open(dir, "cxi0", Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherDev := uapi.NewDevice(other)
	wantErrno(t, "first enable", dev.EnableService(id, true), syscall.ENOSPC)
	wantErrno(t, "second enable, other device", otherDev.EnableService(id, true), syscall.ENOSPC)
	if d, err := dev.GetService(id); err != nil || d.Enable {
		t.Fatalf("after refused enables: enabled %v, err %v; want disabled", d.Enable, err)
	}
	wantErrno(t, "third enable, fault spent", dev.EnableService(id, true), 0)
}

func TestFaultUntilCleared(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{NoSync: true})
	if err := s.InjectFault(Fault{Op: uapi.OpSvcAlloc, Errno: syscall.ENOSPC, Count: -1}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Services()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, _, err := dev.AllocService(podDesc(100))
		wantErrno(t, "alloc under a standing fault", err, syscall.ENOSPC)
		after, err := s.Services()
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Fatalf("alloc %d: %d services, want %d: a refused alloc made one", i, len(after), len(before))
		}
	}
	if err := s.ClearFaults(); err != nil {
		t.Fatal(err)
	}
	mustAlloc(t, dev, podDesc(100))
}

func TestFaultNetnsAndDestroy(t *testing.T) {
	s, dev := open(t, t.TempDir(), Options{NoSync: true})
	d := podDesc(100)
	d.Members[0] = uapi.SvcMember{}
	id := mustAlloc(t, dev, d)
	wantErrno(t, "disable", dev.EnableService(id, false), 0)
	for _, f := range []Fault{
		{Op: uapi.OpSvcSetNetns, Errno: syscall.ENOMEM, Count: 1},
		{Op: uapi.OpSvcDestroy, Errno: syscall.EBUSY, Count: 1},
	} {
		if err := s.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, "set netns", dev.SetNetns(id, 4026531840), syscall.ENOMEM)
	if got, err := dev.GetNetns(id); err == nil {
		t.Fatalf("refused SVC_SET_NETNS left netns %d", got)
	}
	wantErrno(t, "destroy", dev.DestroyService(id), syscall.EBUSY)
	wantErrno(t, "destroy again", dev.DestroyService(id), 0)
}

func TestFaultRefusesWhatTheDriverNeverSays(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{NoSync: true})
	for _, tc := range []struct {
		f    Fault
		want string
	}{
		{Fault{Op: uapi.OpSvcEnable, Errno: syscall.EACCES, Count: 1}, "does not return"},
		{Fault{Op: uapi.OpSvcGet, Errno: syscall.EINVAL, Count: 1}, "no fault can be injected"},
		{Fault{Op: uapi.OpSvcAlloc, Errno: syscall.ENOSPC}, "count 0"},
	} {
		err := s.InjectFault(tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("InjectFault(%+v) = %v, want an error containing %q", tc.f, err, tc.want)
		}
	}
}

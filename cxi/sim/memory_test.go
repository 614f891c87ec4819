package sim

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// TestMemoryFollowsTheFileRules drives a file-backed and an in-memory
// device with the same random commands and wants the same answer to each,
// and the same services after each: OpenMemory changes where the state
// lives, not one rule.
func TestMemoryFollowsTheFileRules(t *testing.T) {
	file, err := Open(t.TempDir(), "cxi0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	mem, err := OpenMemory("cxi0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	devs := [2]*uapi.Device{uapi.NewDevice(file), uapi.NewDevice(mem)}
	rng := rand.New(rand.NewPCG(7, 11))
	for step := range 2000 {
		// IDs 1..12 cover the default and Ethernet services, those made
		// here and IDs never made.
		id := uint32(1 + rng.IntN(12))
		vni := uint16(1024 + rng.IntN(4))
		enable := rng.IntN(3) > 0
		inode := uint32(4026531840 + rng.IntN(3))
		op := rng.IntN(6)
		var what string
		var answers [2]any
		for i, dev := range devs {
			switch op {
			case 0, 1:
				what = "alloc"
				sid, _, err := dev.AllocService(podDesc(vni))
				answers[i] = [2]any{sid, errnoOf(err)}
			case 2:
				what = "enable"
				answers[i] = errnoOf(dev.EnableService(id, enable))
			case 3:
				what = "set netns"
				answers[i] = errnoOf(dev.SetNetns(id, inode))
			case 4:
				what = "destroy"
				answers[i] = errnoOf(dev.DestroyService(id))
			default:
				what = "list"
				svcs, err := dev.ListServices()
				answers[i] = [2]any{svcs, errnoOf(err)}
			}
		}
		if !reflect.DeepEqual(answers[0], answers[1]) {
			t.Fatalf("step %d, %s: file device answered %v, in-memory %v", step, what, answers[0], answers[1])
		}
		fs, err1 := file.Services()
		ms, err2 := mem.Services()
		if err1 != nil || err2 != nil || !reflect.DeepEqual(fs, ms) {
			t.Fatalf("step %d, after %s: services differ:\nfile:   %+v (%v)\nmemory: %+v (%v)", step, what, fs, err1, ms, err2)
		}
	}
}

// errnoOf is err's errno (0 for none), what a caller of the device sees.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}

func TestOpenMemoryRefusesAVF(t *testing.T) {
	if _, err := OpenMemory("cxi1", Options{VF: true, PF: "cxi0"}); err == nil {
		t.Fatal("OpenMemory made a VF without its PF's state")
	}
	if _, err := OpenMemory("../cxi0", Options{}); err == nil {
		t.Fatal("OpenMemory accepted a path as a name")
	}
}

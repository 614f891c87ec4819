package sim

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

// newMemDevice is a Device whose state lives in memory, encoded exactly as
// in the file, so fuzzing runs the dispatcher without disk or flock.
func newMemDevice(opts Options) *Device {
	var mem []byte
	return &Device{name: "cxi0", opts: opts, mem: &mem}
}

const fuzzListRoom = 64 // descriptors the fuzzer's list buffer holds

// fuzzMaxCmds bounds a program, so that each run stays fast (every command
// re-encodes the whole state).
const fuzzMaxCmds = 48

// fuzzProgram splits input into commands: a flags byte (bit 0: VF, bit 1:
// not admin, bit 2: nil pointers, bit 3: no Ethernet service), then
// records of one length byte and that many bytes; at most fuzzMaxCmds of
// them.
func fuzzProgram(in []byte) (Options, [][]byte) {
	if len(in) == 0 {
		return Options{}, nil
	}
	opts := Options{VF: in[0]&1 != 0, NotAdmin: in[0]&2 != 0, NoEthernetService: in[0]&8 != 0}
	var cmds [][]byte
	for rest := in[1:]; len(rest) > 0 && len(cmds) < fuzzMaxCmds; {
		n := min(int(rest[0]), len(rest)-1)
		cmds = append(cmds, rest[1:1+n])
		rest = rest[1+n:]
	}
	return opts, cmds
}

// encodeProgram is the inverse of fuzzProgram, for seeds.
func encodeProgram(flags byte, cmds ...[]byte) []byte {
	out := []byte{flags}
	for _, c := range cmds {
		out = append(out, byte(len(c)))
		out = append(out, c...)
	}
	return out
}

func FuzzWrite(f *testing.F) {
	m := func(v interface{ MarshalBinary() ([]byte, error) }) []byte {
		b, _ := v.MarshalBinary()
		return b
	}
	netns := podDesc(1024)
	netns.Members[0] = uapi.SvcMember{}
	f.Add(encodeProgram(0,
		m(uapi.SvcAllocCmd{Desc: netns}),
		m(uapi.SvcEnableCmd{SvcID: 2}),
		m(uapi.SvcSetNetnsCmd{SvcID: 2, Netns: 4026532000}),
		m(uapi.SvcEnableCmd{SvcID: 2, Enable: true}),
		m(uapi.SvcGetNetnsCmd{SvcID: 2}),
		m(uapi.SvcListGetCmd{Count: 8}),
		m(uapi.SvcGetCmd{SvcID: 2}),
		m(uapi.SvcDestroyCmd{SvcID: 2}),
	))
	ranged := podDesc()
	ranged.RestrictedVNIs = false
	f.Add(encodeProgram(0,
		m(uapi.SvcAllocCmd{Desc: ranged}),
		m(uapi.SvcVNIRangeCmd{Op: uapi.OpSvcSetVNIRange, SvcID: 2, VNIMin: 1024, VNIMax: 2047}),
		m(uapi.SvcVNIRangeCmd{Op: uapi.OpSvcGetVNIRange, SvcID: 2}),
		m(uapi.SvcEnableCmd{SvcID: 2, Enable: true}),
		m(uapi.SvcAllocCmd{Desc: ranged}),
		m(uapi.SvcVNIRangeCmd{Op: uapi.OpSvcSetVNIRange, SvcID: 3, VNIMin: 1536, VNIMax: 1536}),
		m(uapi.SvcAllocCmd{Desc: podDesc(1100)}),
		m(uapi.SvcVNIRangeCmd{Op: uapi.OpSvcSetVNIRange, SvcID: 3, VNIMin: 8, VNIMax: 15}),
	))
	tles := podDesc(7, 8, 9, 10)
	tles.Limits[uapi.RsrcTLE] = uapi.Limits{Max: 9}
	tles.Limits[uapi.RsrcLE] = uapi.Limits{Max: 100, Res: 10}
	f.Add(encodeProgram(0, m(uapi.SvcAllocCmd{Desc: tles}), m(uapi.SvcAllocCmd{Desc: tles}),
		m(uapi.SvcAllocCmd{Desc: tles}), m(uapi.SvcAllocCmd{Desc: tles}), m(uapi.SvcDestroyCmd{SvcID: 1})))
	f.Add(encodeProgram(1, m(uapi.SvcAllocCmd{Desc: netns}), m(uapi.SvcListGetCmd{})))
	f.Add(encodeProgram(4, m(uapi.SvcAllocCmd{Desc: netns})))
	f.Add(encodeProgram(8, m(uapi.SvcAllocCmd{Desc: tles}), m(uapi.SvcDestroyCmd{SvcID: 2}),
		m(uapi.SvcEnableCmd{SvcID: 2}), m(uapi.SvcDestroyCmd{SvcID: 3})))
	f.Add([]byte{0, 3, 28, 0, 0})

	f.Fuzz(runProgram)
}

// runProgram runs one fuzz program against a fresh in-memory NIC.
func runProgram(t *testing.T, in []byte) {
	opts, cmds := fuzzProgram(in)
	d := newMemDevice(opts)
	resp := make([]byte, 256)
	list := make([]byte, fuzzListRoom*uapi.SvcDescSize)
	for _, raw := range cmds {
		cmd := alignedBytes(len(raw))
		copy(cmd, raw)
		// Point the pointer fields at real memory (or nil), as a
		// well-behaved caller would; the kernel checks pointers, the
		// simulation cannot.
		if op, err := uapi.PeekOp(cmd); err == nil {
			if size, ok := uapi.CmdSize(op); ok && size == len(cmd) && size >= 16 {
				withPtrs := len(in) > 0 && in[0]&4 == 0
				clear(cmd[uapi.RespOffset : uapi.RespOffset+8])
				if withPtrs {
					putPtr(cmd, uapi.RespOffset, resp)
				}
				if op == uapi.OpSvcListGet {
					count := binary.LittleEndian.Uint32(cmd[16:])
					binary.LittleEndian.PutUint32(cmd[16:], min(count, fuzzListRoom))
					clear(cmd[uapi.ListOffset : uapi.ListOffset+8])
					if withPtrs {
						putPtr(cmd, uapi.ListOffset, list)
					}
				}
			}
		}
		n, err := d.Write(cmd)
		if err == nil && n != len(cmd) {
			t.Fatalf("Write returned %d of %d bytes without an error", n, len(cmd))
		}
		var errno syscall.Errno
		if err != nil && (n != 0 || !errors.As(err, &errno)) {
			t.Fatalf("Write = %d, %v; want 0 and an errno", n, err)
		}
		checkInvariants(t, d)
	}
}

// checkInvariants asserts what the real driver guarantees whatever it was
// asked.
func checkInvariants(t *testing.T, d *Device) {
	t.Helper()
	err := d.view(func(st *state) syscall.Errno {
		if err := st.check(); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Services {
			if s.RMU > 0 && !s.Desc.Enable {
				t.Fatalf("disabled service %d holds %d RMU entries", s.Desc.SvcID, s.RMU)
			}
			if s.Desc.RestrictedVNIs && s.Desc.NumVldVNIs > uapi.MaxVNIs {
				t.Fatalf("service %d has %d VNIs", s.Desc.SvcID, s.Desc.NumVldVNIs)
			}
		}
		if a, b, ok := overlappingProfiles(st); ok {
			t.Fatalf("profiles %+v and %+v overlap", a, b)
		}
		if st.rmuUsed() > numRMUEntries {
			t.Fatalf("%d RMU entries in use", st.rmuUsed())
		}
		return 0
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMemDeviceMatchesFile(t *testing.T) {
	// The in-memory state used for fuzzing runs the same rules.
	d := newMemDevice(Options{NoEthernetService: true})
	dev := uapi.NewDevice(d)
	id := mustAlloc(t, dev, podDesc(1024))
	wantErrno(t, "destroy default", dev.DestroyService(1), syscall.EINVAL)
	descs, err := dev.ListServices()
	if err != nil || len(descs) != 2 || descs[1].SvcID != id {
		t.Fatalf("ListServices = %+v, %v", descs, err)
	}
}

// overlappingProfiles returns two profiles that vni_overlap_test should
// have kept apart: overlapping, and not both exact VNIs.
func overlappingProfiles(st *state) (vniAttr, vniAttr, bool) {
	var all []vniAttr
	for _, s := range st.Services {
		all = append(all, s.profiles()...)
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.Match != 0 && b.Match != 0 && a.overlaps(b) && (a.Ignore != 0 || b.Ignore != 0) {
				return a, b, true
			}
		}
	}
	return vniAttr{}, vniAttr{}, false
}

package uapi

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

// loadGolden reads testdata/golden.txt: wire images made by gcc from the
// real cxi-abi.h.
func loadGolden(t testing.TB) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/golden.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	golden := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad golden line %q", line)
		}
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("golden %s: %v", name, err)
		}
		golden[name] = b
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return golden
}

// goldenDesc holds the field values the C program set for "svc_desc".
func goldenDesc() SvcDesc {
	d := SvcDesc{
		RestrictedMembers: true, RestrictedVNIs: true, RestrictedTCs: true,
		ResourceLimits: true, Enable: true, CntrPoolID: 2,
		NumVldVNIs: 2, VNIs: [MaxVNIs]uint16{1024, 0x1234},
		Members: [MaxMembers]SvcMember{{Type: MemberUID, ID: 1000}, {Type: MemberGID, ID: 0xdeadbeef}},
		SvcID:   0x01020304,
	}
	d.TCs[TCLowLatency] = true
	d.TCs[TCBestEffort] = true
	for i := range d.Limits {
		d.Limits[i] = Limits{Max: uint16(100 * (i + 1)), Res: uint16(i)}
	}
	return d
}

// goldenAllocDesc holds the descriptor of the "alloc" command.
func goldenAllocDesc() SvcDesc {
	d := SvcDesc{RestrictedMembers: true, RestrictedVNIs: true, RestrictedTCs: true, ResourceLimits: true, NumVldVNIs: 1}
	d.VNIs[0] = 1024
	d.TCs[TCLowLatency] = true
	d.TCs[TCBestEffort] = true
	d.Limits[RsrcTXQ] = Limits{Max: 1024, Res: 2}
	d.Limits[RsrcLE] = Limits{Max: 16384}
	return d
}

func TestGoldenEncoding(t *testing.T) {
	golden := loadGolden(t)
	fail := FailInfo{NoTLEPools: true, NoCntrPools: true}
	for i := range fail.RsrcAvail {
		fail.RsrcAvail[i] = uint16(0x100 + i)
	}
	tests := []struct {
		name string
		v    encoding.BinaryMarshaler
		size int
	}{
		{"svc_desc", goldenDesc(), SvcDescSize},
		{"fail_info", fail, FailInfoSize},
		{"alloc", SvcAllocCmd{Desc: goldenAllocDesc()}, SvcAllocCmdSize},
		{"alloc_resp", SvcAllocResp{SvcID: 7, Fail: FailInfo{RsrcAvail: [NumRsrcTypes]uint16{RsrcTLE: 1536}, NoTLEPools: true}}, SvcAllocRespSize},
		{"destroy", SvcDestroyCmd{SvcID: 42}, SvcDestroyCmdSize},
		{"list", SvcListGetCmd{Count: 3}, SvcListGetCmdSize},
		{"list_resp", SvcListGetResp{Count: 5}, SvcListGetRespSize},
		{"get", SvcGetCmd{SvcID: 9}, SvcGetCmdSize},
		{"enable", SvcEnableCmd{SvcID: 11, Enable: true}, SvcEnableCmdSize},
		{"set_netns", SvcSetNetnsCmd{SvcID: 12, Netns: 4026532000}, SvcSetNetnsCmdSize},
		{"get_netns", SvcGetNetnsCmd{SvcID: 13}, SvcGetNetnsCmdSize},
		{"value_resp", ValueResp{Value: 4026532000}, ValueRespSize},
		{"set_vni_range", SvcVNIRangeCmd{Op: OpSvcSetVNIRange, SvcID: 14, VNIMin: 64, VNIMax: 127}, SvcVNIRangeCmdSize},
		{"get_vni_range", SvcVNIRangeCmd{Op: OpSvcGetVNIRange, SvcID: 15}, SvcVNIRangeCmdSize},
		{"vni_range_resp", VNIRangeResp{VNIMin: 4096, VNIMax: 8191}, VNIRangeRespSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, ok := golden[tc.name]
			if !ok {
				t.Fatalf("no golden image %q", tc.name)
			}
			if len(want) != tc.size {
				t.Fatalf("golden %s has %d bytes, the size constant says %d", tc.name, len(want), tc.size)
			}
			got, err := tc.v.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from gcc's\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestGoldenDecoding(t *testing.T) {
	golden := loadGolden(t)
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("decode %s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	d, err := DecodeSvcDesc(golden["svc_desc"])
	if err != nil {
		t.Fatal(err)
	}
	check("svc_desc", d, goldenDesc())

	alloc, err := DecodeSvcAlloc(golden["alloc"])
	if err != nil {
		t.Fatal(err)
	}
	check("alloc", alloc, SvcAllocCmd{Desc: goldenAllocDesc()})

	ar, err := DecodeSvcAllocResp(golden["alloc_resp"])
	if err != nil {
		t.Fatal(err)
	}
	check("alloc_resp", ar, SvcAllocResp{SvcID: 7, Fail: FailInfo{RsrcAvail: [NumRsrcTypes]uint16{RsrcTLE: 1536}, NoTLEPools: true}})

	destroy, err := DecodeSvcDestroy(golden["destroy"])
	check("destroy", destroy, SvcDestroyCmd{SvcID: 42})
	if err != nil {
		t.Fatal(err)
	}
	list, err := DecodeSvcListGet(golden["list"])
	check("list", list, SvcListGetCmd{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	lr, err := DecodeSvcListGetResp(golden["list_resp"])
	check("list_resp", lr, SvcListGetResp{Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	get, err := DecodeSvcGet(golden["get"])
	check("get", get, SvcGetCmd{SvcID: 9})
	if err != nil {
		t.Fatal(err)
	}
	en, err := DecodeSvcEnable(golden["enable"])
	check("enable", en, SvcEnableCmd{SvcID: 11, Enable: true})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := DecodeSvcSetNetns(golden["set_netns"])
	check("set_netns", sn, SvcSetNetnsCmd{SvcID: 12, Netns: 4026532000})
	if err != nil {
		t.Fatal(err)
	}
	gn, err := DecodeSvcGetNetns(golden["get_netns"])
	check("get_netns", gn, SvcGetNetnsCmd{SvcID: 13})
	if err != nil {
		t.Fatal(err)
	}
	vr, err := DecodeValueResp(golden["value_resp"])
	check("value_resp", vr, ValueResp{Value: 4026532000})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]SvcVNIRangeCmd{
		"set_vni_range": {Op: OpSvcSetVNIRange, SvcID: 14, VNIMin: 64, VNIMax: 127},
		"get_vni_range": {Op: OpSvcGetVNIRange, SvcID: 15},
	} {
		got, err := DecodeSvcVNIRange(golden[name])
		if err != nil {
			t.Fatal(err)
		}
		check(name, got, want)
	}
	rr, err := DecodeVNIRangeResp(golden["vni_range_resp"])
	if err != nil {
		t.Fatal(err)
	}
	check("vni_range_resp", rr, VNIRangeResp{VNIMin: 4096, VNIMax: 8191})
	var fi FailInfo
	if err := fi.UnmarshalBinary(golden["fail_info"]); err != nil {
		t.Fatal(err)
	}
	if !fi.NoTLEPools || !fi.NoCntrPools || fi.NoLEPools || fi.RsrcAvail[RsrcAC] != 0x107 {
		t.Errorf("decode fail_info: %+v", fi)
	}
}

// TestDescFieldOffsets sets one field at a time and checks which bytes of
// the wire image it touches, against the offsets gcc reports for
// struct cxi_svc_desc (offsetof on x86_64).
func TestDescFieldOffsets(t *testing.T) {
	tests := []struct {
		name  string
		set   func(*SvcDesc)
		bytes map[int]byte
	}{
		{"restricted_members bit 0", func(d *SvcDesc) { d.RestrictedMembers = true }, map[int]byte{0: 0x01}},
		{"restricted_vnis bit 1", func(d *SvcDesc) { d.RestrictedVNIs = true }, map[int]byte{0: 0x02}},
		{"restricted_tcs bit 2", func(d *SvcDesc) { d.RestrictedTCs = true }, map[int]byte{0: 0x04}},
		{"resource_limits bit 3", func(d *SvcDesc) { d.ResourceLimits = true }, map[int]byte{0: 0x08}},
		{"enable bit 4", func(d *SvcDesc) { d.Enable = true }, map[int]byte{0: 0x10}},
		{"is_system_svc bit 5", func(d *SvcDesc) { d.IsSystemSvc = true }, map[int]byte{0: 0x20}},
		{"cntr_pool_id bits 6-7", func(d *SvcDesc) { d.CntrPoolID = 3 }, map[int]byte{0: 0xc0}},
		{"num_vld_vnis at 1", func(d *SvcDesc) { d.NumVldVNIs = 4 }, map[int]byte{1: 4}},
		{"vnis[0] at 2", func(d *SvcDesc) { d.VNIs[0] = 0xabcd }, map[int]byte{2: 0xcd, 3: 0xab}},
		{"vnis[3] at 8", func(d *SvcDesc) { d.VNIs[3] = 0x0102 }, map[int]byte{8: 0x02, 9: 0x01}},
		{"tcs[0] at 10", func(d *SvcDesc) { d.TCs[TCDedicatedAccess] = true }, map[int]byte{10: 1}},
		{"tcs[4] (ETH) at 14", func(d *SvcDesc) { d.TCs[TCEth] = true }, map[int]byte{14: 1}},
		{"members[0].svc_member at 16", func(d *SvcDesc) { d.Members[0].ID = 0x04030201 }, map[int]byte{16: 1, 17: 2, 18: 3, 19: 4}},
		{"members[0].type at 20", func(d *SvcDesc) { d.Members[0].Type = MemberNetNS }, map[int]byte{20: 3}},
		{"members[1].svc_member at 24", func(d *SvcDesc) { d.Members[1].ID = 7 }, map[int]byte{24: 7}},
		{"members[1].type at 28", func(d *SvcDesc) { d.Members[1].Type = MemberGID }, map[int]byte{28: 2}},
		{"limits.ptes.max at 32", func(d *SvcDesc) { d.Limits[RsrcPTE].Max = 0x0800 }, map[int]byte{33: 0x08}},
		{"limits.ptes.res at 34", func(d *SvcDesc) { d.Limits[RsrcPTE].Res = 6 }, map[int]byte{34: 6}},
		{"limits.tles.max at 56", func(d *SvcDesc) { d.Limits[RsrcTLE].Max = 8 }, map[int]byte{56: 8}},
		{"limits.acs.res at 62", func(d *SvcDesc) { d.Limits[RsrcAC].Res = 2 }, map[int]byte{62: 2}},
		{"svc_id at 64", func(d *SvcDesc) { d.SvcID = 0x0a0b0c0d }, map[int]byte{64: 0x0d, 65: 0x0c, 66: 0x0b, 67: 0x0a}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d SvcDesc
			tc.set(&d)
			b, err := d.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != SvcDescSize {
				t.Fatalf("size %d, want %d", len(b), SvcDescSize)
			}
			for i, got := range b {
				if want := tc.bytes[i]; got != want {
					t.Fatalf("byte %d = %#x, want %#x (image %x)", i, got, want, b)
				}
			}
			var back SvcDesc
			if err := back.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if back != d {
				t.Fatalf("round trip: got %+v, want %+v", back, d)
			}
		})
	}
}

func TestCommandLayout(t *testing.T) {
	// Offsets of the fields the driver reads, from gcc's offsetof.
	if RespOffset != 8 || ListOffset != 24 || offAllocDesc != 16 || offListCount != 16 ||
		offCmdSvcID != 16 || offEnable != 20 || offNoRespSvcID != 4 || offNetns != 8 || offAllocFail != 4 ||
		offVNIMin != 20 || offVNIMax != 24 {
		t.Fatal("a command field offset changed")
	}
	for op, want := range map[Op]int{
		OpSvcAlloc: 88, OpSvcDestroy: 8, OpSvcListGet: 32, OpSvcGet: 24,
		OpSvcEnable: 24, OpSvcSetNetns: 12, OpSvcGetNetns: 24, OpSvcSetVNIRange: 32, OpSvcGetVNIRange: 32,
	} {
		if got, ok := CmdSize(op); !ok || got != want {
			t.Errorf("CmdSize(%s) = %d, %v; want %d", op, got, ok, want)
		}
	}
	if _, ok := CmdSize(OpLNIAlloc); ok {
		t.Error("CmdSize(LNI_ALLOC) is not a service command")
	}
	// Op codes as computed from the C enum.
	for op, want := range map[Op]uint32{
		OpSvcListGet: 27, OpSvcAlloc: 28, OpSvcDestroy: 29, OpSvcUpdate: 44, OpSvcGet: 45,
		OpSvcEnable: 80, OpSvcSetVNIRange: 81, OpSvcGetVNIRange: 82, OpSvcSetNetns: 84, OpSvcGetNetns: 85, OpMax: 110,
	} {
		if uint32(op) != want {
			t.Errorf("%s = %d, want %d", op, uint32(op), want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	golden := loadGolden(t)
	alloc := golden["alloc"]
	tests := []struct {
		name string
		err  error
		fn   func() error
	}{
		{"alloc short", ErrSize, func() error { _, err := DecodeSvcAlloc(alloc[:87]); return err }},
		{"alloc long", ErrSize, func() error { _, err := DecodeSvcAlloc(append(append([]byte{}, alloc...), 0)); return err }},
		{"alloc as destroy", ErrSize, func() error { _, err := DecodeSvcDestroy(alloc); return err }},
		{"destroy wrong op", ErrOp, func() error { _, err := DecodeSvcDestroy([]byte{28, 0, 0, 0, 1, 0, 0, 0}); return err }},
		{"get wrong op", ErrOp, func() error { _, err := DecodeSvcGet(golden["get_netns"]); return err }},
		{"desc short", ErrSize, func() error { _, err := DecodeSvcDesc(make([]byte, 67)); return err }},
		{"list ragged", ErrSize, func() error { _, err := DecodeSvcList(make([]byte, 69)); return err }},
		{"peek empty", ErrSize, func() error { _, err := PeekOp(nil); return err }},
		{"cntr pool 4", ErrRange, func() error { _, err := SvcDesc{CntrPoolID: 4}.MarshalBinary(); return err }},
		{"alloc cntr pool 9", ErrRange, func() error { _, err := SvcAllocCmd{Desc: SvcDesc{CntrPoolID: 9}}.MarshalBinary(); return err }},
		{"vni range wrong op", ErrOp, func() error {
			b := append([]byte{}, golden["set_vni_range"]...)
			b[0] = byte(OpSvcGet)
			_, err := DecodeSvcVNIRange(b)
			return err
		}},
		{"encode vni range with another op", ErrOp, func() error { _, err := SvcVNIRangeCmd{Op: OpSvcGet}.MarshalBinary(); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
		})
	}
}

func TestDescNonCanonicalBools(t *testing.T) {
	// The kernel reads any nonzero byte of a C bool as true; so do we, and
	// we write back 0/1 with a zero padding byte.
	b := make([]byte, SvcDescSize)
	b[offTCs] = 0x7f
	b[offTCs+5] = 0xff // padding
	d, err := DecodeSvcDesc(b)
	if err != nil {
		t.Fatal(err)
	}
	if !d.TCs[TCDedicatedAccess] {
		t.Fatal("nonzero bool byte decoded as false")
	}
	out, _ := d.MarshalBinary()
	if out[offTCs] != 1 || out[offTCs+5] != 0 {
		t.Fatalf("canonical encoding: tcs[0]=%#x padding=%#x", out[offTCs], out[offTCs+5])
	}
}

func TestStrings(t *testing.T) {
	for got, want := range map[string]string{
		OpSvcAlloc.String():    "SVC_ALLOC",
		Op(3).String():         "OP(3)",
		TCBestEffort.String():  "BEST_EFFORT",
		TC(9).String():         "TC(9)",
		RsrcTLE.String():       "TLEs",
		MemberNetNS.String():   "netns",
		MemberType(7).String(): "member(7)",
		FailInfo{NoTLEPools: true, RsrcAvail: [NumRsrcTypes]uint16{RsrcPTE: 5}}.String(): "no TLE pools; available: PTEs=5",
		FailInfo{}.String(): "no details",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

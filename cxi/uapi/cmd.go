package uapi

import "fmt"

// Op is enum cxi_command_opcode, the first field of every command.
type Op uint32

// The op codes of the service commands (values of the C enum) and its
// bounds. The driver rejects op <= OpInvalid or op >= OpMax with EINVAL.
const (
	OpInvalid        Op = 0
	OpLNIAlloc       Op = 1
	OpSvcListGet     Op = 27
	OpSvcAlloc       Op = 28
	OpSvcDestroy     Op = 29
	OpSvcUpdate      Op = 44
	OpSvcGet         Op = 45
	OpSvcEnable      Op = 80
	OpSvcSetVNIRange Op = 81
	OpSvcGetVNIRange Op = 82
	OpSvcSetNetns    Op = 84
	OpSvcGetNetns    Op = 85
	OpMax            Op = 110
)

var opNames = map[Op]string{
	OpLNIAlloc:       "LNI_ALLOC",
	OpSvcListGet:     "SVC_LIST_GET",
	OpSvcAlloc:       "SVC_ALLOC",
	OpSvcDestroy:     "SVC_DESTROY",
	OpSvcUpdate:      "SVC_UPDATE",
	OpSvcGet:         "SVC_GET",
	OpSvcEnable:      "SVC_ENABLE",
	OpSvcSetVNIRange: "SVC_SET_VNI_RANGE",
	OpSvcGetVNIRange: "SVC_GET_VNI_RANGE",
	OpSvcSetNetns:    "SVC_SET_NETNS",
	OpSvcGetNetns:    "SVC_GET_NETNS",
}

// String returns the driver's name of the command, e.g. "SVC_ALLOC".
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("OP(%d)", uint32(o))
}

// Sizes of the commands and responses (sizeof on x86_64) and the offsets of
// the user pointers inside the commands.
const (
	// RespOffset is where every command that has a response keeps its
	// response pointer (void __user *resp).
	RespOffset = 8
	// ListOffset is where SVC_LIST_GET keeps its svc_list pointer.
	ListOffset = 24

	SvcAllocCmdSize    = 88 // struct cxi_svc_alloc_cmd; descriptor at offset 16
	SvcAllocRespSize   = 24 // struct cxi_svc_alloc_resp; fail_info at offset 4
	SvcDestroyCmdSize  = 8  // struct cxi_svc_destroy_cmd (no response)
	SvcListGetCmdSize  = 32 // struct cxi_svc_list_get_cmd; count at 16
	SvcListGetRespSize = 4  // struct cxi_svc_list_get_resp
	SvcGetCmdSize      = 24 // struct cxi_svc_get_cmd; svc_id at 16
	SvcGetRespSize     = SvcDescSize
	SvcEnableCmdSize   = 24 // struct cxi_svc_enable_cmd; enable at 20
	SvcSetNetnsCmdSize = 12 // struct cxi_svc_set_netns_cmd (no response)
	SvcGetNetnsCmdSize = 24 // struct cxi_svc_get_netns_cmd
	ValueRespSize      = 4  // struct cxi_svc_get_value_resp
	SvcVNIRangeCmdSize = 32 // struct cxi_svc_vni_range_cmd, for SET and GET
	VNIRangeRespSize   = 8  // struct cxi_svc_get_vni_range_resp

	offAllocDesc   = 16
	offAllocFail   = 4
	offListCount   = 16
	offCmdSvcID    = 16 // svc_id of the commands laid out {op, resp, svc_id}
	offEnable      = 20
	offNoRespSvcID = 4 // svc_id of the commands laid out {op, svc_id}
	offNetns       = 8
	offVNIMin      = 20
	offVNIMax      = 24
)

// CmdSize returns the exact length of the command op, for the service
// commands this package encodes; ok is false for any other op.
func CmdSize(op Op) (size int, ok bool) {
	switch op {
	case OpSvcAlloc:
		return SvcAllocCmdSize, true
	case OpSvcDestroy:
		return SvcDestroyCmdSize, true
	case OpSvcListGet:
		return SvcListGetCmdSize, true
	case OpSvcGet:
		return SvcGetCmdSize, true
	case OpSvcEnable:
		return SvcEnableCmdSize, true
	case OpSvcSetNetns:
		return SvcSetNetnsCmdSize, true
	case OpSvcGetNetns:
		return SvcGetNetnsCmdSize, true
	case OpSvcSetVNIRange, OpSvcGetVNIRange:
		return SvcVNIRangeCmdSize, true
	}
	return 0, false
}

// PeekOp returns the op code at the start of a command of at least 4 bytes.
func PeekOp(b []byte) (Op, error) {
	if len(b) < 4 {
		return OpInvalid, fmt.Errorf("command: %w: %d bytes, need at least 4", ErrSize, len(b))
	}
	return Op(le.Uint32(b)), nil
}

// header encodes the op code into a zeroed command of the given size.
func header(op Op, size int) []byte {
	b := make([]byte, size)
	le.PutUint32(b, uint32(op))
	return b
}

// check verifies the length and op code of a command being decoded.
func check(b []byte, want Op, size int) error {
	if len(b) != size {
		return fmt.Errorf("decode %s: %w: %d bytes, want %d", want, ErrSize, len(b), size)
	}
	if op := Op(le.Uint32(b)); op != want {
		return fmt.Errorf("decode %s: %w %s", want, ErrOp, op)
	}
	return nil
}

// SvcAllocCmd is struct cxi_svc_alloc_cmd (88 bytes): allocate a service.
// Its response is a [SvcAllocResp].
type SvcAllocCmd struct {
	Desc SvcDesc
}

// MarshalBinary encodes the command with a nil response pointer.
func (c SvcAllocCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcAlloc, SvcAllocCmdSize)
	if err := c.Desc.encodeInto(b[offAllocDesc : offAllocDesc+SvcDescSize]); err != nil {
		return nil, fmt.Errorf("encode %s: %w", OpSvcAlloc, err)
	}
	return b, nil
}

// DecodeSvcAlloc decodes an SVC_ALLOC command. The response pointer is not
// part of the result; read it at [RespOffset].
func DecodeSvcAlloc(b []byte) (SvcAllocCmd, error) {
	var c SvcAllocCmd
	if err := check(b, OpSvcAlloc, SvcAllocCmdSize); err != nil {
		return c, err
	}
	err := c.Desc.UnmarshalBinary(b[offAllocDesc : offAllocDesc+SvcDescSize])
	return c, err
}

// SvcAllocResp is struct cxi_svc_alloc_resp (24 bytes). The driver writes
// it on success (SvcID set) and on failure (Fail set).
type SvcAllocResp struct {
	SvcID uint32
	Fail  FailInfo
}

// MarshalBinary encodes the response.
func (r SvcAllocResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, SvcAllocRespSize)
	le.PutUint32(b, r.SvcID)
	r.Fail.put(b[offAllocFail : offAllocFail+FailInfoSize])
	return b, nil
}

// DecodeSvcAllocResp decodes an SVC_ALLOC response.
func DecodeSvcAllocResp(b []byte) (SvcAllocResp, error) {
	var r SvcAllocResp
	if len(b) != SvcAllocRespSize {
		return r, fmt.Errorf("decode %s response: %w: %d bytes, want %d", OpSvcAlloc, ErrSize, len(b), SvcAllocRespSize)
	}
	r.SvcID = le.Uint32(b)
	r.Fail.get(b[offAllocFail : offAllocFail+FailInfoSize])
	return r, nil
}

// SvcDestroyCmd is struct cxi_svc_destroy_cmd (8 bytes). It has no
// response pointer.
type SvcDestroyCmd struct {
	SvcID uint32
}

// MarshalBinary encodes the command.
func (c SvcDestroyCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcDestroy, SvcDestroyCmdSize)
	le.PutUint32(b[offNoRespSvcID:], c.SvcID)
	return b, nil
}

// DecodeSvcDestroy decodes an SVC_DESTROY command.
func DecodeSvcDestroy(b []byte) (SvcDestroyCmd, error) {
	if err := check(b, OpSvcDestroy, SvcDestroyCmdSize); err != nil {
		return SvcDestroyCmd{}, err
	}
	return SvcDestroyCmd{SvcID: le.Uint32(b[offNoRespSvcID:])}, nil
}

// SvcListGetCmd is struct cxi_svc_list_get_cmd (32 bytes). The driver
// writes the number of services to the response ([SvcListGetResp]) and,
// only when Count is at least that number, the descriptors to the array at
// the svc_list pointer ([ListOffset]).
type SvcListGetCmd struct {
	Count uint32
}

// MarshalBinary encodes the command with nil response and list pointers.
func (c SvcListGetCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcListGet, SvcListGetCmdSize)
	le.PutUint32(b[offListCount:], c.Count)
	return b, nil
}

// DecodeSvcListGet decodes an SVC_LIST_GET command.
func DecodeSvcListGet(b []byte) (SvcListGetCmd, error) {
	if err := check(b, OpSvcListGet, SvcListGetCmdSize); err != nil {
		return SvcListGetCmd{}, err
	}
	return SvcListGetCmd{Count: le.Uint32(b[offListCount:])}, nil
}

// SvcListGetResp is struct cxi_svc_list_get_resp (4 bytes).
type SvcListGetResp struct {
	Count uint32
}

// MarshalBinary encodes the response.
func (r SvcListGetResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, SvcListGetRespSize)
	le.PutUint32(b, r.Count)
	return b, nil
}

// DecodeSvcListGetResp decodes an SVC_LIST_GET response.
func DecodeSvcListGetResp(b []byte) (SvcListGetResp, error) {
	if len(b) != SvcListGetRespSize {
		return SvcListGetResp{}, fmt.Errorf("decode %s response: %w: %d bytes, want %d", OpSvcListGet, ErrSize, len(b), SvcListGetRespSize)
	}
	return SvcListGetResp{Count: le.Uint32(b)}, nil
}

// DecodeSvcList decodes an array of descriptors as SVC_LIST_GET writes it.
func DecodeSvcList(b []byte) ([]SvcDesc, error) {
	if len(b)%SvcDescSize != 0 {
		return nil, fmt.Errorf("decode service list: %w: %d bytes is not a multiple of %d", ErrSize, len(b), SvcDescSize)
	}
	descs := make([]SvcDesc, len(b)/SvcDescSize)
	for i := range descs {
		if err := descs[i].UnmarshalBinary(b[i*SvcDescSize : (i+1)*SvcDescSize]); err != nil {
			return nil, err
		}
	}
	return descs, nil
}

// SvcGetCmd is struct cxi_svc_get_cmd (24 bytes). Its response is the
// 68-byte descriptor.
type SvcGetCmd struct {
	SvcID uint32
}

// MarshalBinary encodes the command with a nil response pointer.
func (c SvcGetCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcGet, SvcGetCmdSize)
	le.PutUint32(b[offCmdSvcID:], c.SvcID)
	return b, nil
}

// DecodeSvcGet decodes an SVC_GET command.
func DecodeSvcGet(b []byte) (SvcGetCmd, error) {
	if err := check(b, OpSvcGet, SvcGetCmdSize); err != nil {
		return SvcGetCmd{}, err
	}
	return SvcGetCmd{SvcID: le.Uint32(b[offCmdSvcID:])}, nil
}

// DecodeSvcDesc decodes the 68-byte descriptor that SVC_GET writes.
func DecodeSvcDesc(b []byte) (SvcDesc, error) {
	var d SvcDesc
	err := d.UnmarshalBinary(b)
	return d, err
}

// SvcEnableCmd is struct cxi_svc_enable_cmd (24 bytes). The driver writes
// no response.
type SvcEnableCmd struct {
	SvcID  uint32
	Enable bool
}

// MarshalBinary encodes the command with a nil response pointer.
func (c SvcEnableCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcEnable, SvcEnableCmdSize)
	le.PutUint32(b[offCmdSvcID:], c.SvcID)
	b[offEnable] = boolByte(c.Enable)
	return b, nil
}

// DecodeSvcEnable decodes an SVC_ENABLE command.
func DecodeSvcEnable(b []byte) (SvcEnableCmd, error) {
	if err := check(b, OpSvcEnable, SvcEnableCmdSize); err != nil {
		return SvcEnableCmd{}, err
	}
	return SvcEnableCmd{SvcID: le.Uint32(b[offCmdSvcID:]), Enable: b[offEnable] != 0}, nil
}

// SvcSetNetnsCmd is struct cxi_svc_set_netns_cmd (12 bytes): admit the
// processes of one network namespace, named by its inode number. It has no
// response pointer.
type SvcSetNetnsCmd struct {
	SvcID uint32
	Netns uint32
}

// MarshalBinary encodes the command.
func (c SvcSetNetnsCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcSetNetns, SvcSetNetnsCmdSize)
	le.PutUint32(b[offNoRespSvcID:], c.SvcID)
	le.PutUint32(b[offNetns:], c.Netns)
	return b, nil
}

// DecodeSvcSetNetns decodes an SVC_SET_NETNS command.
func DecodeSvcSetNetns(b []byte) (SvcSetNetnsCmd, error) {
	if err := check(b, OpSvcSetNetns, SvcSetNetnsCmdSize); err != nil {
		return SvcSetNetnsCmd{}, err
	}
	return SvcSetNetnsCmd{SvcID: le.Uint32(b[offNoRespSvcID:]), Netns: le.Uint32(b[offNetns:])}, nil
}

// SvcGetNetnsCmd is struct cxi_svc_get_netns_cmd (24 bytes). Its response
// is a [ValueResp] holding the netns inode.
type SvcGetNetnsCmd struct {
	SvcID uint32
}

// MarshalBinary encodes the command with a nil response pointer.
func (c SvcGetNetnsCmd) MarshalBinary() ([]byte, error) {
	b := header(OpSvcGetNetns, SvcGetNetnsCmdSize)
	le.PutUint32(b[offCmdSvcID:], c.SvcID)
	return b, nil
}

// DecodeSvcGetNetns decodes an SVC_GET_NETNS command.
func DecodeSvcGetNetns(b []byte) (SvcGetNetnsCmd, error) {
	if err := check(b, OpSvcGetNetns, SvcGetNetnsCmdSize); err != nil {
		return SvcGetNetnsCmd{}, err
	}
	return SvcGetNetnsCmd{SvcID: le.Uint32(b[offCmdSvcID:])}, nil
}

// ValueResp is struct cxi_svc_get_value_resp (4 bytes).
type ValueResp struct {
	Value uint32
}

// MarshalBinary encodes the response.
func (r ValueResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, ValueRespSize)
	le.PutUint32(b, r.Value)
	return b, nil
}

// DecodeValueResp decodes a struct cxi_svc_get_value_resp.
func DecodeValueResp(b []byte) (ValueResp, error) {
	if len(b) != ValueRespSize {
		return ValueResp{}, fmt.Errorf("decode value response: %w: %d bytes, want %d", ErrSize, len(b), ValueRespSize)
	}
	return ValueResp{Value: le.Uint32(b)}, nil
}

// SvcVNIRangeCmd is struct cxi_svc_vni_range_cmd (32 bytes), which both
// SVC_SET_VNI_RANGE and SVC_GET_VNI_RANGE send. SET gives a service that
// was allocated with restricted_vnis=0 the VNIs VNIMin to VNIMax (a
// power-of-two count, VNIMin a multiple of it) and writes no response; GET
// ignores VNIMin and VNIMax and answers a [VNIRangeResp].
type SvcVNIRangeCmd struct {
	// Op is OpSvcSetVNIRange or OpSvcGetVNIRange.
	Op             Op
	SvcID          uint32
	VNIMin, VNIMax uint32
}

// MarshalBinary encodes the command with a nil response pointer. The
// error wraps ErrOp when Op is neither VNI-range command.
func (c SvcVNIRangeCmd) MarshalBinary() ([]byte, error) {
	if c.Op != OpSvcSetVNIRange && c.Op != OpSvcGetVNIRange {
		return nil, fmt.Errorf("encode VNI range command: %w %s", ErrOp, c.Op)
	}
	b := header(c.Op, SvcVNIRangeCmdSize)
	le.PutUint32(b[offCmdSvcID:], c.SvcID)
	le.PutUint32(b[offVNIMin:], c.VNIMin)
	le.PutUint32(b[offVNIMax:], c.VNIMax)
	return b, nil
}

// DecodeSvcVNIRange decodes an SVC_SET_VNI_RANGE or SVC_GET_VNI_RANGE
// command.
func DecodeSvcVNIRange(b []byte) (SvcVNIRangeCmd, error) {
	op, err := PeekOp(b)
	if err != nil {
		return SvcVNIRangeCmd{}, err
	}
	if op != OpSvcGetVNIRange {
		op = OpSvcSetVNIRange // check names the op it wanted
	}
	if err := check(b, op, SvcVNIRangeCmdSize); err != nil {
		return SvcVNIRangeCmd{}, err
	}
	return SvcVNIRangeCmd{Op: op, SvcID: le.Uint32(b[offCmdSvcID:]),
		VNIMin: le.Uint32(b[offVNIMin:]), VNIMax: le.Uint32(b[offVNIMax:])}, nil
}

// VNIRangeResp is struct cxi_svc_get_vni_range_resp (8 bytes).
type VNIRangeResp struct {
	VNIMin, VNIMax uint32
}

// MarshalBinary encodes the response.
func (r VNIRangeResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, VNIRangeRespSize)
	le.PutUint32(b, r.VNIMin)
	le.PutUint32(b[4:], r.VNIMax)
	return b, nil
}

// DecodeVNIRangeResp decodes an SVC_GET_VNI_RANGE response.
func DecodeVNIRangeResp(b []byte) (VNIRangeResp, error) {
	if len(b) != VNIRangeRespSize {
		return VNIRangeResp{}, fmt.Errorf("decode %s response: %w: %d bytes, want %d", OpSvcGetVNIRange, ErrSize, len(b), VNIRangeRespSize)
	}
	return VNIRangeResp{VNIMin: le.Uint32(b), VNIMax: le.Uint32(b[4:])}, nil
}

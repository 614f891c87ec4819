package health

import (
	"fmt"
	"strconv"
)

// The cxi_ss1 driver's hardware-error family, from the driver's uapi header
// (include/uapi/ethernet/cxi-abi.h) and cass_errors.c.
const (
	cxierrFamily = "cxierr"
	cxierrGroup  = "cxierr_mc_group"

	// cxierrCmdErrMsg is CXIERR_ERR_MSG, the one command the family sends.
	cxierrCmdErrMsg = 1
	// genlHdrLen is the size of struct genlmsghdr: cmd u8, version u8,
	// reserved u16.
	genlHdrLen = 4

	// Attribute types of enum cxierr_nldev_attr.
	cxierrAttrDevNum = 1 // u32: N of cxiN
	cxierrAttrCSRFlg = 2 // u32: offset of the ERR_FLG CSR that raised it
	cxierrAttrBit    = 3 // u8: the bit set in that CSR (0..63)
)

// HWError is one hardware-error notification from the driver: the driver
// sends one for each error-flag bit it handles in its error interrupt.
type HWError struct {
	// Dev is the device number, N in cxiN.
	Dev uint32
	// CSRFlag is the offset of the error-flag CSR that has the bit set.
	CSRFlag uint32
	// Bit is the bit number in that CSR.
	Bit uint8
}

// NIC returns the name of the device the error belongs to, "cxiN".
func (e HWError) NIC() string { return "cxi" + strconv.FormatUint(uint64(e.Dev), 10) }

// String describes the error for a log line or an event's reason.
func (e HWError) String() string {
	return fmt.Sprintf("hardware error on %s: csr 0x%x bit %d", e.NIC(), e.CSRFlag, e.Bit)
}

package health

import (
	"fmt"
	"strconv"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// The cxi_ss1 driver's hardware-error family, from the driver's uapi header
// (include/uapi/ethernet/cxi-abi.h) and cass_errors.c.
const (
	cxierrFamily = "cxierr"
	cxierrGroup  = "cxierr_mc_group"

	// cxierrCmdErrMsg is CXIERR_ERR_MSG, the one command the family sends.
	cxierrCmdErrMsg = 1

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

// decodeHWError decodes one cxierr generic-netlink message. It returns an
// error wrapping [ErrMalformed] when the command is not CXIERR_ERR_MSG, an
// attribute has the wrong size, or one of the three attributes is missing.
// Attributes it does not know are skipped, as a newer driver may add some.
func decodeHWError(m genetlink.Message) (HWError, error) {
	if m.Header.Command != cxierrCmdErrMsg {
		return HWError{}, fmt.Errorf("%w: cxierr command %d", ErrMalformed, m.Header.Command)
	}
	ad, err := netlink.NewAttributeDecoder(m.Data)
	if err != nil {
		return HWError{}, fmt.Errorf("%w: cxierr attributes: %w", ErrMalformed, err)
	}
	var e HWError
	var seen [4]bool
	for ad.Next() {
		switch t := ad.Type(); t {
		case cxierrAttrDevNum:
			e.Dev = ad.Uint32()
		case cxierrAttrCSRFlg:
			e.CSRFlag = ad.Uint32()
		case cxierrAttrBit:
			e.Bit = ad.Uint8()
		default:
			continue
		}
		seen[ad.Type()] = true
	}
	if err := ad.Err(); err != nil {
		return HWError{}, fmt.Errorf("%w: cxierr attributes: %w", ErrMalformed, err)
	}
	for _, a := range []struct {
		typ  int
		name string
	}{{cxierrAttrDevNum, "DEV_NUM"}, {cxierrAttrCSRFlg, "CSR_FLG"}, {cxierrAttrBit, "BIT"}} {
		if !seen[a.typ] {
			return HWError{}, fmt.Errorf("%w: cxierr message without %s", ErrMalformed, a.name)
		}
	}
	return e, nil
}

// decodeHWErrorMessage decodes a cxierr notification as it comes off the
// socket: a netlink message whose payload is a generic-netlink message.
func decodeHWErrorMessage(nm netlink.Message) (HWError, error) {
	var gm genetlink.Message
	if err := gm.UnmarshalBinary(nm.Data); err != nil {
		return HWError{}, fmt.Errorf("%w: genetlink header: %w", ErrMalformed, err)
	}
	return decodeHWError(gm)
}

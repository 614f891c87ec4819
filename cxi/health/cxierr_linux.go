//go:build linux

package health

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// decodeHWErrorMessage decodes a cxierr notification's payload as it comes
// off the socket: a generic-netlink header, then attributes. It returns an
// error wrapping [ErrMalformed] when the header is short, the command is
// not CXIERR_ERR_MSG, an attribute is malformed or has the wrong size, or
// one of the three attributes is missing. Attributes it does not know are
// skipped, as a newer driver may add some.
func decodeHWErrorMessage(b []byte) (HWError, error) {
	if len(b) < genlHdrLen {
		return HWError{}, fmt.Errorf("%w: generic netlink header of %d bytes", ErrMalformed, len(b))
	}
	if b[0] != cxierrCmdErrMsg {
		return HWError{}, fmt.Errorf("%w: cxierr command %d", ErrMalformed, b[0])
	}
	attrs, err := nl.ParseRouteAttr(alignAttrs(b[genlHdrLen:]))
	if err != nil {
		return HWError{}, fmt.Errorf("%w: cxierr attributes: %w", ErrMalformed, err)
	}
	var e HWError
	var seen [4]bool
	for _, a := range attrs {
		typ := a.Attr.Type &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		var size int
		switch typ {
		case cxierrAttrDevNum, cxierrAttrCSRFlg:
			size = 4
		case cxierrAttrBit:
			size = 1
		default:
			continue
		}
		if len(a.Value) != size {
			return HWError{}, fmt.Errorf("%w: cxierr attribute %d of %d bytes, want %d", ErrMalformed, typ, len(a.Value), size)
		}
		switch typ {
		case cxierrAttrDevNum:
			e.Dev = binary.NativeEndian.Uint32(a.Value)
		case cxierrAttrCSRFlg:
			e.CSRFlag = binary.NativeEndian.Uint32(a.Value)
		case cxierrAttrBit:
			e.Bit = a.Value[0]
		}
		seen[typ] = true
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

// alignAttrs returns b padded with zeros to a multiple of four bytes, as the
// kernel pads every attribute. nl.ParseRouteAttr steps over an attribute's
// padding without checking that it is there, and panics on a last attribute
// whose padding is missing (TestParseRouteAttrNeedsPadding).
func alignAttrs(b []byte) []byte {
	n := (len(b) + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
	if n == len(b) {
		return b
	}
	p := make([]byte, n)
	copy(p, b)
	return p
}

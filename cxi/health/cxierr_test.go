package health

import (
	"errors"
	"testing"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// encodeAttrs builds a cxierr generic-netlink message from attributes.
func cxierrMessage(t testing.TB, cmd uint8, fn func(ae *netlink.AttributeEncoder)) genetlink.Message {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return genetlink.Message{Header: genetlink.Header{Command: cmd, Version: 1}, Data: b}
}

func TestDecodeHWError(t *testing.T) {
	tests := []struct {
		name    string
		cmd     uint8
		attrs   func(ae *netlink.AttributeEncoder)
		want    HWError
		wantErr bool
	}{
		{
			name: "driver order",
			cmd:  cxierrCmdErrMsg,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint32(cxierrAttrCSRFlg, 0x1a0)
				ae.Uint8(cxierrAttrBit, 63)
				ae.Uint32(cxierrAttrDevNum, 3)
			},
			want: HWError{Dev: 3, CSRFlag: 0x1a0, Bit: 63},
		},
		{
			name: "unknown attribute skipped",
			cmd:  cxierrCmdErrMsg,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint32(cxierrAttrDevNum, 0)
				ae.String(9, "from a newer driver")
				ae.Uint32(cxierrAttrCSRFlg, 7)
				ae.Uint8(cxierrAttrBit, 1)
			},
			want: HWError{Dev: 0, CSRFlag: 7, Bit: 1},
		},
		{
			name: "wrong command",
			cmd:  0,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint32(cxierrAttrDevNum, 0)
				ae.Uint32(cxierrAttrCSRFlg, 7)
				ae.Uint8(cxierrAttrBit, 1)
			},
			wantErr: true,
		},
		{
			name: "missing bit",
			cmd:  cxierrCmdErrMsg,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint32(cxierrAttrDevNum, 0)
				ae.Uint32(cxierrAttrCSRFlg, 7)
			},
			wantErr: true,
		},
		{
			name: "missing device",
			cmd:  cxierrCmdErrMsg,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint32(cxierrAttrCSRFlg, 7)
				ae.Uint8(cxierrAttrBit, 1)
			},
			wantErr: true,
		},
		{
			name: "device number of the wrong size",
			cmd:  cxierrCmdErrMsg,
			attrs: func(ae *netlink.AttributeEncoder) {
				ae.Uint16(cxierrAttrDevNum, 0)
				ae.Uint32(cxierrAttrCSRFlg, 7)
				ae.Uint8(cxierrAttrBit, 1)
			},
			wantErr: true,
		},
		{
			name:    "no attributes",
			cmd:     cxierrCmdErrMsg,
			attrs:   func(*netlink.AttributeEncoder) {},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeHWError(cxierrMessage(t, tt.cmd, tt.attrs))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("decodeHWError = %+v, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeHWError = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDecodeHWErrorMessage(t *testing.T) {
	got, err := decodeHWErrorMessage(hwErrorMessage(t, 2, 0x10, 5))
	if err != nil || got != (HWError{Dev: 2, CSRFlag: 0x10, Bit: 5}) {
		t.Fatalf("decodeHWErrorMessage = %+v, %v", got, err)
	}
	if got.NIC() != "cxi2" || got.String() != "hardware error on cxi2: csr 0x10 bit 5" {
		t.Fatalf("NIC, String = %q, %q", got.NIC(), got.String())
	}
	for _, data := range [][]byte{nil, {1}, {1, 1, 0}, {1, 1, 0, 0, 8, 0}} {
		if _, err := decodeHWErrorMessage(netlink.Message{Data: data}); !errors.Is(err, ErrMalformed) {
			t.Errorf("decodeHWErrorMessage(%x) error %v, want ErrMalformed", data, err)
		}
	}
}

// FuzzDecodeHWError feeds arbitrary generic-netlink payloads (header and
// attributes) to the decoder. An accepted message must encode back to a
// message that decodes to the same error.
func FuzzDecodeHWError(f *testing.F) {
	for _, m := range []netlink.Message{hwErrorMessage(f, 0, 0x100, 3), hwErrorMessage(f, 255, 0xffffffff, 63)} {
		f.Add(m.Data)
	}
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 8, 0, 1, 0, 1, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeHWErrorMessage(netlink.Message{Data: b})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := decodeHWErrorMessage(hwErrorMessage(t, e.Dev, e.CSRFlag, e.Bit))
		if err != nil || again != e {
			t.Fatalf("round trip of %+v = %+v, %v", e, again, err)
		}
	})
}

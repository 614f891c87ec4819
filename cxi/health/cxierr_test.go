//go:build linux

package health

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

func TestDecodeHWError(t *testing.T) {
	tests := []struct {
		name    string
		msg     []byte
		want    HWError
		wantErr bool
	}{
		{
			name: "driver order",
			msg:  genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrCSRFlg, 0x1a0), nlAttr(cxierrAttrBit, []byte{63}), nlU32(cxierrAttrDevNum, 3)),
			want: HWError{Dev: 3, CSRFlag: 0x1a0, Bit: 63},
		},
		{
			name: "unknown attribute skipped",
			msg: genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrDevNum, 0), nlAttr(9, []byte("from a newer driver\x00")),
				nlU32(cxierrAttrCSRFlg, 7), nlAttr(cxierrAttrBit, []byte{1})),
			want: HWError{Dev: 0, CSRFlag: 7, Bit: 1},
		},
		{
			name:    "wrong command",
			msg:     genlPayload(0, nlU32(cxierrAttrDevNum, 0), nlU32(cxierrAttrCSRFlg, 7), nlAttr(cxierrAttrBit, []byte{1})),
			wantErr: true,
		},
		{
			name:    "missing bit",
			msg:     genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrDevNum, 0), nlU32(cxierrAttrCSRFlg, 7)),
			wantErr: true,
		},
		{
			name:    "missing device",
			msg:     genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrCSRFlg, 7), nlAttr(cxierrAttrBit, []byte{1})),
			wantErr: true,
		},
		{
			name:    "device number of the wrong size",
			msg:     genlPayload(cxierrCmdErrMsg, nlAttr(cxierrAttrDevNum, []byte{0, 0}), nlU32(cxierrAttrCSRFlg, 7), nlAttr(cxierrAttrBit, []byte{1})),
			wantErr: true,
		},
		{
			name:    "no attributes",
			msg:     genlPayload(cxierrCmdErrMsg),
			wantErr: true,
		},
		{
			name:    "attribute longer than the message",
			msg:     append(genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrDevNum, 0)), 12, 0, 2, 0),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeHWErrorMessage(tt.msg)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("decodeHWErrorMessage = %+v, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeHWErrorMessage = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDecodeHWErrorMessage(t *testing.T) {
	got, err := decodeHWErrorMessage(hwErrorMessage(2, 0x10, 5))
	if err != nil || got != (HWError{Dev: 2, CSRFlag: 0x10, Bit: 5}) {
		t.Fatalf("decodeHWErrorMessage = %+v, %v", got, err)
	}
	if got.NIC() != "cxi2" || got.String() != "hardware error on cxi2: csr 0x10 bit 5" {
		t.Fatalf("NIC, String = %q, %q", got.NIC(), got.String())
	}
	for _, data := range [][]byte{nil, {1}, {1, 1, 0}, {1, 1, 0, 0, 8, 0}} {
		if _, err := decodeHWErrorMessage(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("decodeHWErrorMessage(%x) error %v, want ErrMalformed", data, err)
		}
	}
}

// TestParseRouteAttrNeedsPadding shows why decodeHWErrorMessage pads the
// attributes (issue 16, item 8): the library's attribute parser steps over
// the padding of the last attribute without checking that it is there.
func TestParseRouteAttrNeedsPadding(t *testing.T) {
	unpadded := []byte{5, 0, cxierrAttrBit, 0, 7} // one u8 attribute, its 3 bytes of padding cut
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		_, _ = nl.ParseRouteAttr(unpadded)
		return false
	}()
	if !panicked {
		t.Fatal("nl.ParseRouteAttr took an unpadded last attribute; alignAttrs may no longer be needed")
	}
	attrs, err := nl.ParseRouteAttr(alignAttrs(unpadded))
	if err != nil || len(attrs) != 1 || attrs[0].Attr.Type != cxierrAttrBit || string(attrs[0].Value) != "\x07" {
		t.Fatalf("padded: %+v, %v", attrs, err)
	}
	msg := genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrDevNum, 1), nlU32(cxierrAttrCSRFlg, 2), unpadded)
	if e, err := decodeHWErrorMessage(msg); err != nil || e != (HWError{Dev: 1, CSRFlag: 2, Bit: 7}) {
		t.Fatalf("decodeHWErrorMessage of an unpadded message = %+v, %v", e, err)
	}
}

// FuzzDecodeHWError feeds arbitrary generic-netlink payloads (header and
// attributes) to the decoder. An accepted message must encode back to a
// message that decodes to the same error.
func FuzzDecodeHWError(f *testing.F) {
	f.Add(hwErrorMessage(0, 0x100, 3))
	f.Add(hwErrorMessage(255, 0xffffffff, 63))
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 8, 0, 1, 0, 1, 0, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 5, 0, 3, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeHWErrorMessage(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := decodeHWErrorMessage(hwErrorMessage(e.Dev, e.CSRFlag, e.Bit))
		if err != nil || again != e {
			t.Fatalf("round trip of %+v = %+v, %v", e, again, err)
		}
	})
}

func BenchmarkDecodeHWErrorMessage(b *testing.B) {
	msg := hwErrorMessage(3, 0x2a8, 17)
	for b.Loop() {
		if _, err := decodeHWErrorMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}

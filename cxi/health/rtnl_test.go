package health

import (
	"errors"
	"slices"
	"testing"

	"github.com/mdlayher/netlink"
)

func TestDecodeLinkMessage(t *testing.T) {
	tests := []struct {
		name    string
		msg     netlink.Message
		want    linkUpdate
		wantOK  bool
		wantErr bool
	}{
		{
			name:   "new link up",
			msg:    linkMessage(t, rtmNewLink, 7, iffUp, "hsn0", 6),
			want:   linkUpdate{Index: 7, Name: "hsn0", AdminUp: true, Oper: "up"},
			wantOK: true,
		},
		{
			name:   "new link lower layer down",
			msg:    linkMessage(t, rtmNewLink, 7, 0, "hsn1", 3),
			want:   linkUpdate{Index: 7, Name: "hsn1", Oper: "lowerlayerdown"},
			wantOK: true,
		},
		{
			name:   "deleted",
			msg:    linkMessage(t, rtmDelLink, 9, 0, "hsn2", 2),
			want:   linkUpdate{Index: 9, Name: "hsn2", Deleted: true, Oper: "down"},
			wantOK: true,
		},
		{
			name:   "operstate out of range is unknown",
			msg:    linkMessage(t, rtmNewLink, 1, 0, "hsn3", 200),
			want:   linkUpdate{Index: 1, Name: "hsn3", Oper: "unknown"},
			wantOK: true,
		},
		{
			name: "another message type is skipped",
			msg:  netlink.Message{Header: netlink.Header{Type: 20}, Data: []byte{1, 2}},
		},
		{
			name:    "short header",
			msg:     netlink.Message{Header: netlink.Header{Type: rtmNewLink}, Data: make([]byte, 15)},
			wantErr: true,
		},
		{
			name:    "no name",
			msg:     netlink.Message{Header: netlink.Header{Type: rtmNewLink}, Data: make([]byte, ifInfoMsgLen)},
			wantErr: true,
		},
		{
			name:    "truncated attribute",
			msg:     netlink.Message{Header: netlink.Header{Type: rtmNewLink}, Data: append(make([]byte, ifInfoMsgLen), 9, 0, 3, 0, 'h')},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := decodeLinkMessage(tt.msg)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) || ok {
					t.Fatalf("decodeLinkMessage = %+v, %v, %v; want ErrMalformed", got, ok, err)
				}
				return
			}
			if err != nil || ok != tt.wantOK || got != tt.want {
				t.Fatalf("decodeLinkMessage = %+v, %v, %v; want %+v, %v", got, ok, err, tt.want, tt.wantOK)
			}
		})
	}
}

// FuzzDecodeLinkMessage feeds arbitrary RTM_NEWLINK payloads.
func FuzzDecodeLinkMessage(f *testing.F) {
	f.Add(linkMessage(f, rtmNewLink, 3, iffUp, "hsn0", 6).Data)
	f.Add(linkMessage(f, rtmNewLink, 3, 0, "eth0", 2).Data)
	f.Add(make([]byte, ifInfoMsgLen))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, ok, err := decodeLinkMessage(netlink.Message{Header: netlink.Header{Type: rtmNewLink}, Data: b})
		if err != nil {
			if ok || !errors.Is(err, ErrMalformed) {
				t.Fatalf("ok %v with error %v (want ErrMalformed)", ok, err)
			}
			return
		}
		if !ok || u.Name == "" {
			t.Fatalf("accepted %+v, ok %v", u, ok)
		}
		if u.Oper != "" && !slices.Contains(operStates[:], u.Oper) {
			t.Fatalf("operstate %q", u.Oper)
		}
	})
}

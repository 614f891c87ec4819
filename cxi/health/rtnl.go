package health

import (
	"encoding/binary"
	"fmt"

	"github.com/mdlayher/netlink"
)

// rtnetlink values from the kernel's uapi (linux/rtnetlink.h,
// linux/if_link.h); kept here so the decoder builds on any platform.
const (
	rtmNewLink    = 16 // RTM_NEWLINK
	rtmDelLink    = 17 // RTM_DELLINK
	rtmgrpLink    = 1  // RTMGRP_LINK
	ifInfoMsgLen  = 16 // struct ifinfomsg
	iflaIfName    = 3  // IFLA_IFNAME
	iflaOperState = 16 // IFLA_OPERSTATE
	iffUp         = 0x1
)

// linkUpdate is what the monitor needs from one rtnetlink link message.
type linkUpdate struct {
	Index   int32
	Name    string
	Deleted bool   // RTM_DELLINK
	AdminUp bool   // IFF_UP
	Oper    string // IFLA_OPERSTATE by name; "" when absent
}

// decodeLinkMessage decodes an RTM_NEWLINK or RTM_DELLINK message. ok is
// false, with no error, for any other message type (the link group carries
// only these, but a dump or an ack may arrive on the same socket). It returns
// an error wrapping [ErrMalformed] for a short header, malformed attributes,
// or a message without a name.
func decodeLinkMessage(m netlink.Message) (u linkUpdate, ok bool, err error) {
	switch m.Header.Type {
	case rtmNewLink, rtmDelLink:
	default:
		return linkUpdate{}, false, nil
	}
	if len(m.Data) < ifInfoMsgLen {
		return linkUpdate{}, false, fmt.Errorf("%w: ifinfomsg of %d bytes", ErrMalformed, len(m.Data))
	}
	// struct ifinfomsg: family u8, pad u8, type u16, index s32, flags u32,
	// change u32, in host byte order like all of netlink.
	u.Deleted = m.Header.Type == rtmDelLink
	u.Index = int32(binary.NativeEndian.Uint32(m.Data[4:8]))
	u.AdminUp = binary.NativeEndian.Uint32(m.Data[8:12])&iffUp != 0
	ad, err := netlink.NewAttributeDecoder(m.Data[ifInfoMsgLen:])
	if err != nil {
		return linkUpdate{}, false, fmt.Errorf("%w: link attributes: %w", ErrMalformed, err)
	}
	for ad.Next() {
		switch ad.Type() {
		case iflaIfName:
			u.Name = ad.String()
		case iflaOperState:
			if v := ad.Uint8(); int(v) < len(operStates) {
				u.Oper = operStates[v]
			} else {
				u.Oper = operStates[0]
			}
		}
	}
	if err := ad.Err(); err != nil {
		return linkUpdate{}, false, fmt.Errorf("%w: link attributes: %w", ErrMalformed, err)
	}
	if u.Name == "" {
		return linkUpdate{}, false, fmt.Errorf("%w: link message without a name", ErrMalformed)
	}
	return u, true, nil
}

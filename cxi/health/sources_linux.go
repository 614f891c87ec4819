//go:build linux

package health

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// subscribeLinks subscribes to the link messages of the calling thread's
// network namespace.
var subscribeLinks = subscribeLinksAt(nil)

// openHWErrorSubscription joins the driver's cxierr multicast group. It
// returns an error wrapping [fs.ErrNotExist] when the family or its group
// is not registered (no cxi_ss1 driver loaded).
func openHWErrorSubscription() (subscription, error) {
	return openGenlSubscription(cxierrFamily, cxierrGroup)
}

// genlSubscription passes on the messages of one generic-netlink family.
type genlSubscription struct {
	s      *nl.NetlinkSocket
	family uint16
}

// openGenlSubscription resolves a generic-netlink family by name and joins
// one of its multicast groups.
func openGenlSubscription(family, group string) (subscription, error) {
	f, err := netlink.GenlFamilyGet(family)
	if err != nil {
		return nil, fmt.Errorf("resolve generic netlink family %q: %w", family, err)
	}
	for _, g := range f.Groups {
		if g.Name != group {
			continue
		}
		s, err := nl.Subscribe(unix.NETLINK_GENERIC)
		if err != nil {
			return nil, fmt.Errorf("open generic netlink socket: %w", err)
		}
		if err := joinGroup(s, g.ID); err != nil {
			s.Close()
			return nil, fmt.Errorf("join %s/%s: %w", family, group, err)
		}
		return &genlSubscription{s: s, family: f.ID}, nil
	}
	return nil, fmt.Errorf("family %q has no group %q: %w", family, group, fs.ErrNotExist)
}

// joinGroup joins the multicast group with the given number.
// nl.Subscribe joins groups through bind's 32-bit group mask, which holds
// groups 1 to 32 only and drops the others without an error; generic
// netlink numbers its groups as families register, past 32 on a kernel
// with many (TestSubscribeJoinsNoGroupPast32). NETLINK_ADD_MEMBERSHIP
// takes any number.
func joinGroup(s *nl.NetlinkSocket, group uint32) error {
	return unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(group))
}

func (s *genlSubscription) Receive() ([][]byte, error) {
	msgs, from, err := s.s.Receive()
	if err != nil {
		return nil, err
	}
	// Only the kernel's notifications of the joined family are wanted;
	// anything else (there should be nothing) is dropped here rather than
	// misdecoded.
	if from.Pid != nl.PidKernel {
		return nil, nil
	}
	var kept [][]byte
	for _, m := range msgs {
		if m.Header.Type == s.family {
			kept = append(kept, m.Data)
		}
	}
	return kept, nil
}

func (s *genlSubscription) Close() error {
	s.s.Close()
	return nil
}

// isOverrun reports whether a receive error means the kernel dropped
// notifications because the socket buffer was full: changes may have been
// missed. The link subscription's library reports receive errors as text
// ("Receive failed: %v"), so the errno's own text is matched there
// (TestLinkSubscriptionReportsOverrunAsText).
func isOverrun(err error) bool {
	return errors.Is(err, unix.ENOBUFS) || (err != nil && strings.HasSuffix(err.Error(), ": "+unix.ENOBUFS.Error()))
}

// ethtoolClient queries ethtool through its ioctl: ETHTOOL_GDRVINFO for
// the driver, ETHTOOL_GSET for speed and duplex, ETHTOOL_GLINK for the link
// state.
type ethtoolClient struct {
	e *ethtool.Ethtool
}

// openEthtool opens the socket the ethtool ioctl goes through.
func openEthtool() (ethtoolQuerier, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("ethtool ioctl socket: %w", err)
	}
	return &ethtoolClient{e: e}, nil
}

func (c *ethtoolClient) Query(ifname string) (EthtoolInfo, error) {
	var info EthtoolInfo
	var errs []error
	if di, err := c.e.DriverInfo(ifname); err != nil {
		errs = append(errs, fmt.Errorf("driver info: %w", err))
	} else {
		info.Driver, info.DriverVersion = di.Driver, di.Version
		info.FirmwareVersion, info.BusInfo = di.FwVersion, di.BusInfo
	}
	// ETHTOOL_GSET rather than the library's GetLinkSettings: that one
	// sizes its link-mode masks for fewer words than newer kernels have, and
	// then prints a warning on the process's standard output at every call
	// before it falls back to ETHTOOL_GSET itself
	// (TestGetLinkSettingsWritesToStdout).
	var cmd ethtool.EthtoolCmd
	if speed, err := c.e.CmdGet(&cmd, ifname); err != nil {
		errs = append(errs, fmt.Errorf("link settings: %w", err))
	} else {
		info.SpeedMbps = ethtoolSpeed(speed)
		info.Duplex = ethtoolDuplex(cmd.Duplex)
	}
	if up, err := c.e.LinkState(ifname); err != nil {
		errs = append(errs, fmt.Errorf("link state: %w", err))
	} else {
		info.LinkDetected = up != 0
	}
	return info, errors.Join(errs...)
}

func (c *ethtoolClient) Close() error {
	c.e.Close()
	return nil
}

// ethtoolSpeed maps ethtool's speed, where SPEED_UNKNOWN is all ones, to Mb/s
// with 0 for unknown.
func ethtoolSpeed(v uint32) int {
	if v == 0 || v > math.MaxInt32 {
		return 0
	}
	return int(v)
}

// ethtoolDuplex names DUPLEX_HALF and DUPLEX_FULL; DUPLEX_UNKNOWN is "".
func ethtoolDuplex(d uint8) string {
	switch d {
	case ethtool.DUPLEX_FULL:
		return "full"
	case ethtool.DUPLEX_HALF:
		return "half"
	}
	return ""
}

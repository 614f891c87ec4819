//go:build linux

package health

import (
	"errors"
	"fmt"
	"io/fs"
	"math"

	"github.com/mdlayher/ethtool"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// openLinkSubscription opens an rtnetlink socket joined to RTMGRP_LINK in
// the calling thread's network namespace.
func openLinkSubscription() (subscription, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{Groups: rtmgrpLink})
	if err != nil {
		return nil, fmt.Errorf("dial rtnetlink: %w", err)
	}
	return c, nil
}

// openHWErrorSubscription joins the driver's cxierr multicast group. It
// returns an error wrapping [fs.ErrNotExist] when the family or its group
// is not registered (no cxi_ss1 driver loaded).
func openHWErrorSubscription() (subscription, error) {
	return openGenlSubscription(cxierrFamily, cxierrGroup)
}

// genlSubscription passes on the messages of one generic-netlink family.
type genlSubscription struct {
	c      *netlink.Conn
	family uint16
}

// openGenlSubscription resolves a generic-netlink family by name and joins
// one of its multicast groups.
func openGenlSubscription(family, group string) (subscription, error) {
	c, err := netlink.Dial(unix.NETLINK_GENERIC, nil)
	if err != nil {
		return nil, fmt.Errorf("dial generic netlink: %w", err)
	}
	gc := genetlink.NewConn(c)
	f, err := gc.GetFamily(family)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("resolve family %q: %w", family, err)
	}
	for _, g := range f.Groups {
		if g.Name != group {
			continue
		}
		if err := gc.JoinGroup(g.ID); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("join %s/%s: %w", family, group, err)
		}
		return &genlSubscription{c: c, family: f.ID}, nil
	}
	_ = c.Close()
	return nil, fmt.Errorf("family %q has no group %q: %w", family, group, fs.ErrNotExist)
}

func (s *genlSubscription) Receive() ([]netlink.Message, error) {
	msgs, err := s.c.Receive()
	if err != nil {
		return nil, err
	}
	// Only the joined family's notifications are wanted; anything else
	// (there should be nothing) is dropped here rather than misdecoded.
	kept := msgs[:0]
	for _, m := range msgs {
		if uint16(m.Header.Type) == s.family {
			kept = append(kept, m)
		}
	}
	return kept, nil
}

func (s *genlSubscription) Close() error { return s.c.Close() }

// isOverrun reports whether a receive error means the kernel dropped
// notifications because the socket buffer was full: the subscription is
// still good, but changes may have been missed.
func isOverrun(err error) bool { return errors.Is(err, unix.ENOBUFS) }

// ethtoolClient queries ethtool through its generic-netlink family (link
// mode and state) and the ETHTOOL_GDRVINFO ioctl (driver information, which
// the netlink interface does not carry).
type ethtoolClient struct {
	nl *ethtool.Client // nil when the ethtool family is missing
	fd int             // socket for the ioctl; -1 when none could be made
}

// openEthtool returns a querier if either way to reach ethtool works. A
// non-nil querier with a non-nil error means one of the two is missing.
func openEthtool() (ethtoolQuerier, error) {
	nl, nlErr := ethtool.New()
	if nlErr != nil {
		nlErr = fmt.Errorf("ethtool netlink: %w", nlErr)
	}
	fd, fdErr := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if fdErr != nil {
		fd = -1
		fdErr = fmt.Errorf("ethtool ioctl socket: %w", fdErr)
	}
	if nl == nil && fd < 0 {
		return nil, errors.Join(nlErr, fdErr)
	}
	return &ethtoolClient{nl: nl, fd: fd}, errors.Join(nlErr, fdErr)
}

func (c *ethtoolClient) Query(ifname string) (EthtoolInfo, error) {
	var info EthtoolInfo
	var errs []error
	if c.fd >= 0 {
		di, err := unix.IoctlGetEthtoolDrvinfo(c.fd, ifname)
		if err != nil {
			errs = append(errs, fmt.Errorf("driver info: %w", err))
		} else {
			info.Driver = unix.ByteSliceToString(di.Driver[:])
			info.DriverVersion = unix.ByteSliceToString(di.Version[:])
			info.FirmwareVersion = unix.ByteSliceToString(di.Fw_version[:])
			info.BusInfo = unix.ByteSliceToString(di.Bus_info[:])
		}
	}
	if c.nl != nil {
		ifi := ethtool.Interface{Name: ifname}
		if lm, err := c.nl.LinkMode(ifi); err != nil {
			errs = append(errs, fmt.Errorf("link mode: %w", err))
		} else {
			info.SpeedMbps = ethtoolSpeed(lm.SpeedMegabits)
			info.Duplex = ethtoolDuplex(lm.Duplex)
		}
		if ls, err := c.nl.LinkState(ifi); err != nil {
			errs = append(errs, fmt.Errorf("link state: %w", err))
		} else {
			info.LinkDetected = ls.Link
		}
	}
	return info, errors.Join(errs...)
}

func (c *ethtoolClient) Close() error {
	var errs []error
	if c.nl != nil {
		errs = append(errs, c.nl.Close())
	}
	if c.fd >= 0 {
		errs = append(errs, unix.Close(c.fd))
	}
	return errors.Join(errs...)
}

// ethtoolSpeed maps ethtool's speed, where SPEED_UNKNOWN is all ones, to Mb/s
// with 0 for unknown.
func ethtoolSpeed(v int) int {
	if v <= 0 || v > math.MaxInt32 {
		return 0
	}
	return v
}

func ethtoolDuplex(d ethtool.Duplex) string {
	switch d {
	case ethtool.Full:
		return "full"
	case ethtool.Half:
		return "half"
	}
	return ""
}

package health

import "github.com/mdlayher/netlink"

// Sources chooses the event sources of a [Monitor] besides sysfs, which is
// always read. The zero value uses the real ones.
type Sources struct {
	// NoLinkEvents turns off the rtnetlink link subscription; link changes
	// are then seen at the next poll only.
	NoLinkEvents bool
	// NoHWErrors turns off the cxierr hardware-error subscription.
	NoHWErrors bool
	// NoEthtool turns off ethtool queries.
	NoEthtool bool

	// Replacements for the real sources, for this package's tests.
	openLink     func() (subscription, error)
	openHWErrors func() (subscription, error)
	openEthtool  func() (ethtoolQuerier, error)
}

// subscription is a netlink socket joined to a multicast group. Receive
// blocks until messages arrive; Close unblocks a pending Receive, which then
// returns an error.
type subscription interface {
	Receive() ([]netlink.Message, error)
	Close() error
}

// ethtoolQuerier asks ethtool about one netdev. Query returns what it could
// learn, and an error (joined, one per failed request) for what it could not.
type ethtoolQuerier interface {
	Query(ifname string) (EthtoolInfo, error)
	Close() error
}

// EthtoolInfo is what ethtool tells about a netdev. Empty strings and zero
// numbers mean unknown.
type EthtoolInfo struct {
	// Driver, DriverVersion, FirmwareVersion and BusInfo come from
	// ETHTOOL_GDRVINFO (what `ethtool -i` prints).
	Driver          string
	DriverVersion   string
	FirmwareVersion string
	BusInfo         string
	// SpeedMbps is the link mode's speed in Mb/s; 0 when unknown.
	SpeedMbps int
	// Duplex is "full", "half" or "" when unknown.
	Duplex string
	// LinkDetected is ethtool's link state ("Link detected").
	LinkDetected bool
}

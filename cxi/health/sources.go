package health

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
	subscribeLinks linkSubscriber
	openHWErrors   func() (subscription, error)
	openEthtool    func() (ethtoolQuerier, error)
}

// linkSubscriber subscribes to the kernel's link messages. It returns the
// updates of one subscription; the channel is closed when the subscription
// ends, which it does when done is closed or when receiving fails. Every
// error the subscription meets goes to onErr, the one that ended it last,
// before the channel is closed. A caller must close done in every case and
// then drain the channel until it is closed, so that nothing is left
// running.
type linkSubscriber func(done <-chan struct{}, onErr func(error)) (<-chan linkUpdate, error)

// subscription is a generic-netlink socket joined to a multicast group.
// Receive blocks until messages arrive and returns the payloads (generic
// netlink header and attributes) of those the kernel sent for the joined
// family; Close unblocks a pending Receive, which then returns an error.
type subscription interface {
	Receive() ([][]byte, error)
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

// Package health watches the link and error state of Slingshot NICs and
// reports one stream of health changes.
//
// A [Monitor] combines four sources for every [Target]:
//
//   - the NIC's sysfs properties (properties/link, properties/pct_eq,
//     properties/speed) and the hsn netdev's operstate, speed and error
//     counters, re-read at a slow interval because sysfs attributes raise
//     no notifications;
//   - rtnetlink link messages (RTM_NEWLINK, RTM_DELLINK) for the hsn
//     netdevs, which trigger an immediate re-read instead of busy polling;
//     when the kernel drops some (an overrun), the monitor subscribes again
//     and re-reads every NIC;
//   - ethtool (driver name and version through ETHTOOL_GDRVINFO, speed and
//     duplex through ETHTOOL_GSET, link state through ETHTOOL_GLINK);
//   - hardware-error notifications the cxi_ss1 driver multicasts on its
//     "cxierr" generic-netlink family (group "cxierr_mc_group").
//
// The health rule: a NIC is healthy when its link is up (properties/link is
// 1), its retry handler runs (properties/pct_eq is not 0), its netdev, when
// one is known, has operstate "up", and it has not seen more than
// [Config.HWErrorLimit] hardware errors within [Config.HWErrorWindow].
// A single hardware error is reported as an [Event] and counted, but does
// not by itself make a NIC unhealthy.
//
// Every source other than sysfs may be missing: no hsn netdevs, no cxierr
// family (driver not loaded, or an older one), no netlink permission, no
// ethtool support in a container. A missing source is logged once
// ("... unavailable, continuing without it") and the monitor carries on
// with the others; sysfs polling always runs.
//
// [Monitor.Run] owns every goroutine it starts and waits for all of them
// before it returns; it closes the channel from [Monitor.Events] on return.
// [Monitor.Snapshot], [Monitor.Recheck] and [Monitor.Events] are safe for
// concurrent use.
package health

//go:build !linux

package health

import "errors"

// Netlink and ethtool exist on Linux only; elsewhere every source reports
// itself unavailable and the monitor runs on sysfs alone.

func subscribeLinks(<-chan struct{}, func(error)) (<-chan linkUpdate, error) {
	return nil, errors.ErrUnsupported
}
func openHWErrorSubscription() (subscription, error) { return nil, errors.ErrUnsupported }
func openEthtool() (ethtoolQuerier, error)           { return nil, errors.ErrUnsupported }
func isOverrun(error) bool                           { return false }
func decodeHWErrorMessage([]byte) (HWError, error)   { return HWError{}, errors.ErrUnsupported }

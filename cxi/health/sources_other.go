//go:build !linux

package health

func openLinkSubscription() (subscription, error)    { return nil, errNotSupported }
func openHWErrorSubscription() (subscription, error) { return nil, errNotSupported }
func openEthtool() (ethtoolQuerier, error)           { return nil, errNotSupported }
func isOverrun(error) bool                           { return false }

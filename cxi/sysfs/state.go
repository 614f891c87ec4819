package sysfs

import (
	"errors"
	"io/fs"
)

// LinkState is the part of a NIC's sysfs state that changes while it runs.
type LinkState struct {
	// Link is properties/link: the PHY is running.
	Link bool
	// SpeedMbps is properties/speed in Mb/s.
	SpeedMbps int
	// PCTEq is properties/pct_eq; nonzero while the retry handler runs.
	PCTEq uint32
	// OperState is the netdev's operstate; empty when the NIC has no
	// netdev.
	OperState string
}

// RetryHandlerRunning reports whether the retry handler runs (pct_eq != 0).
func (s LinkState) RetryHandlerRunning() bool { return s.PCTEq != 0 }

// Up reports whether the link is up: the PHY runs and, where the NIC has a
// netdev, its operstate is "up".
func (s LinkState) Up() bool {
	return s.Link && (s.OperState == "" || s.OperState == OperStateUp)
}

// ReadLinkState re-reads the run-time state of a NIC found by [Discover]:
// properties/link, properties/speed, properties/pct_eq and, when nic has a
// netdev, class/net/<netdev>/operstate. It reads four small files and is
// meant for a health poller.
//
// Every value that could be read is returned; the error joins an
// [*AttrError] for each value that could not (errors.Is(err, ErrMissing)
// when the NIC or netdev is gone).
func ReadLinkState(fsys fs.FS, nic NIC) (LinkState, error) {
	if fsys == nil {
		return LinkState{}, errors.New("read link state: nil file system")
	}
	base := nic.Path
	if base == "" {
		base = classCXI + "/" + nic.Name
	}
	p := base + "/device/properties/"
	r := &attrReader{fsys: fsys}
	var st LinkState
	field(r, p+"link", parseBit, &st.Link)
	field(r, p+"speed", parseSpeed, &st.SpeedMbps)
	field(r, p+"pct_eq", parseUint32, &st.PCTEq)
	if nic.NetDev != nil {
		field(r, classNet+"/"+nic.NetDev.Name+"/operstate", parseOperState, &st.OperState)
	}
	return st, errors.Join(r.problems...)
}

package health

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// readAttr reads one sysfs attribute, at most a page of it.
func readAttr(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrLen+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// readParsed reads the attribute at path and parses it.
func readParsed[T any](path string, parse func([]byte) (T, error)) (T, error) {
	b, err := readAttr(path)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := parse(b)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// read takes a fresh reading of a NIC from sysfs and ethtool. The Status it
// returns has every field but the health verdict, the hardware-error fields
// and the counters kept across readings; the reading has the rule's inputs.
// Problems with informational attributes (speeds, counters, ethtool) are
// logged once and leave the field unknown.
func (p *poller) read(st *nicState) (Status, reading) {
	var s Status
	r := reading{limit: p.m.cfg.HWErrorLimit, window: p.m.cfg.HWErrorWindow}
	props := filepath.Join(st.DeviceDir, "properties")

	r.linkUp, r.linkErr = readParsed(filepath.Join(props, "link"), parseLink)
	s.LinkUp = r.linkUp && r.linkErr == nil
	r.rhRunning, r.rhErr = readParsed(filepath.Join(props, "pct_eq"), parseRetryHandler)
	s.RetryHandler = r.rhRunning && r.rhErr == nil
	speed, err := readParsed(filepath.Join(props, "speed"), parseSpeed)
	p.logOnce(st, "speed", err)
	s.SpeedMbps = speed

	if st.NetDir != "" {
		r.hasNetDev = true
		r.netDev = st.NetDev
		if r.netDev == "" {
			r.netDev = filepath.Base(st.NetDir)
		}
		r.operState, r.operErr = readParsed(filepath.Join(st.NetDir, "operstate"), parseOperState)
		s.OperState = r.operState
		s.NetDevSpeedMbps = p.netDevSpeed(st)
		s.NetErrors = readNetErrors(st.NetDir)
	}
	if p.eth != nil && st.NetDev != "" {
		info, err := p.eth.Query(st.NetDev)
		p.logOnce(st, "ethtool", err)
		s.Ethtool = info
	}
	return s, r
}

// netDevSpeed reads the netdev's speed file. The kernel fails that read with
// EINVAL while the netdev is down or its driver knows no speed; that is
// "unknown", not a problem.
func (p *poller) netDevSpeed(st *nicState) int {
	v, err := readParsed(filepath.Join(st.NetDir, "speed"), parseSpeed)
	if errors.Is(err, syscall.EINVAL) {
		err = nil
	}
	p.logOnce(st, "netdev speed", err)
	return v
}

// readNetErrors reads the netdev's error counters; the ones the kernel does
// not offer, or that do not parse, stay 0.
func readNetErrors(dir string) NetErrors {
	counter := func(rel string) uint64 {
		v, _ := readParsed(filepath.Join(dir, rel), parseCounter)
		return v
	}
	return NetErrors{
		RXErrors:       counter("statistics/rx_errors"),
		TXErrors:       counter("statistics/tx_errors"),
		RXDropped:      counter("statistics/rx_dropped"),
		TXDropped:      counter("statistics/tx_dropped"),
		RXCRCErrors:    counter("statistics/rx_crc_errors"),
		CarrierChanges: counter("carrier_changes"),
	}
}

// logOnce logs err under key the first time it happens for the NIC, and
// forgets it when a later call passes nil, so a problem that comes back is
// logged again.
func (p *poller) logOnce(st *nicState, key string, err error) {
	if err == nil {
		delete(st.logged, key)
		return
	}
	if st.logged[key] {
		return
	}
	st.logged[key] = true
	p.m.log.Warn(key+" unavailable, continuing without it", "nic", st.NIC, "netdev", st.NetDev, "err", err)
}

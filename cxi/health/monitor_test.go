package health

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// offline turns every source but sysfs off.
var offline = Sources{NoLinkEvents: true, NoHWErrors: true, NoEthtool: true}

func TestMonitorReportsLinkChangesOnce(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	ticks := make(chan time.Time)
	log, logs := newLogger()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: ticks, Sources: offline, Logger: log})
	stop := runMonitor(t, m)

	ev := nextEvent(t, m)
	want := Status{Healthy: true, LinkUp: true, RetryHandler: true, OperState: "up", SpeedMbps: 200000,
		NetDevSpeedMbps: 200000, NetErrors: NetErrors{CarrierChanges: 1}}
	if ev.NIC != "cxi0" || !ev.Healthy || ev.Reason != "healthy" || ev.Status != want || ev.HWError != nil {
		t.Fatalf("first event = %+v, want cxi0 healthy with %+v", ev, want)
	}

	// Nothing changed: these polls must not report anything. Taking the
	// second tick means the first poll is done; the next event read below
	// must be the link change, not a spurious one from these.
	tick(t, ticks)
	tick(t, ticks)

	tr.set(linkAttr, "0\n")
	tick(t, ticks)
	ev = nextEvent(t, m)
	if ev.Healthy || ev.Status.LinkUp || ev.Reason != "link down" || ev.Status.Problem != "link down" {
		t.Fatalf("after link 0: %+v, want unhealthy with reason %q", ev, "link down")
	}
	tick(t, ticks)
	tick(t, ticks)

	tr.set(linkAttr, "1\n")
	tick(t, ticks)
	ev = nextEvent(t, m)
	if !ev.Healthy || !ev.Status.LinkUp || ev.Reason != "healthy" {
		t.Fatalf("after link 1: %+v, want healthy", ev)
	}

	// Counters move without an event, but the snapshot has them.
	tr.set(rxErrsAttr, "5\n")
	tick(t, ticks)
	tick(t, ticks) // the poll after the change has finished
	if got := m.Snapshot()["cxi0"]; got.NetErrors.RXErrors != 5 || !got.Healthy {
		t.Fatalf("snapshot = %+v, want healthy with 5 rx errors", got)
	}

	if rest := stop(); len(rest) != 0 {
		t.Fatalf("events after the last change: %+v", rest)
	}
	if n := logs.count("NIC health"); n != 3 {
		t.Errorf("logged %d health changes, want 3:\n%s", n, logs)
	}
}

func TestMonitorHealthRuleFromSysfs(t *testing.T) {
	tests := []struct {
		name        string
		attr, value string
		wantProblem string
	}{
		{"retry handler stopped", pctEqAttr, "0\n", "retry handler not running"},
		{"netdev down", operAttr, "down\n", "netdev hsn0 down"},
		{"link unreadable", linkAttr, "garbage\n", "link state unknown: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			tr := newSysfsTree(t)
			tr.set(tt.attr, tt.value)
			m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time), Sources: offline})
			runMonitor(t, m)
			ev := nextEvent(t, m)
			if ev.Healthy || !strings.HasPrefix(ev.Reason, tt.wantProblem) {
				t.Fatalf("event = %+v, want unhealthy with reason %q...", ev, tt.wantProblem)
			}
		})
	}
}

func TestMonitorWithoutNetdev(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	tr.set(operAttr, "down\n") // must be ignored: the target has no netdev
	target := tr.target()
	target.NetDev, target.NetDir = "", ""
	m := New(Config{Targets: []Target{target}, Ticks: make(chan time.Time),
		Sources: Sources{NoHWErrors: true}})
	runMonitor(t, m)
	if ev := nextEvent(t, m); !ev.Healthy || ev.Status.OperState != "" {
		t.Fatalf("event = %+v, want healthy without operstate", ev)
	}
}

func TestMonitorRecheck(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time), Sources: offline})
	runMonitor(t, m)
	nextEvent(t, m)
	tr.set(operAttr, "lowerlayerdown\n")
	m.Recheck()
	if ev := nextEvent(t, m); ev.Healthy || ev.Reason != "netdev hsn0 lowerlayerdown" {
		t.Fatalf("event = %+v, want netdev lowerlayerdown", ev)
	}
}

func TestMonitorLinkEventTriggersReread(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	links := newFakeLinks()
	log, logs := newLogger()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time), Logger: log,
		Sources: Sources{NoHWErrors: true, NoEthtool: true, subscribeLinks: links.subscribe}})
	stop := runMonitor(t, m)
	nextEvent(t, m)

	tr.set(operAttr, "down\n")
	// A change of a netdev not watched, then an error the subscription goes
	// on after (a message the library could not decode), must not trigger
	// anything; then hsn0's change does.
	links.send(t, linkUpdate{Index: 2, Name: "eth0", Oper: "down"})
	links.warn(t, errFake)
	links.send(t, linkUpdate{Index: 5, Name: "hsn0", Oper: "down"})
	ev := nextEvent(t, m)
	if ev.Healthy || ev.Reason != "netdev hsn0 down" {
		t.Fatalf("event = %+v, want netdev hsn0 down", ev)
	}
	// An overrun (the kernel dropped notifications) ends the subscription:
	// the source subscribes again and re-reads everything.
	tr.set(operAttr, "up\n")
	links.fail(t, unix.ENOBUFS)
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("after overrun: %+v, want healthy", ev)
	}
	if n := links.subscriptions(); n != 2 {
		t.Fatalf("%d subscriptions after an overrun, want 2", n)
	}
	tr.set(operAttr, "dormant\n")
	links.send(t, linkUpdate{Index: 5, Name: "hsn0", Oper: "dormant"})
	if ev := nextEvent(t, m); ev.Reason != "netdev hsn0 dormant" {
		t.Fatalf("event on the new subscription = %+v, want netdev hsn0 dormant", ev)
	}

	// Any other error ends the source, not the monitor.
	links.fail(t, errFake)
	tr.set(operAttr, "up\n")
	m.Recheck()
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("after the source stopped: %+v, want healthy", ev)
	}
	// The source ends a subscription only after it has opened the next one,
	// if any: once the failed one is ended, there is no third.
	links.waitEnded(t, 1)
	if n := links.subscriptions(); n != 2 {
		t.Errorf("%d subscriptions after a failure, want still 2", n)
	}
	stop()
	if logs.count("netlink link events stopped, continuing without it") != 1 {
		t.Errorf("stop of the source not logged once:\n%s", logs)
	}
}

// TestLinkSourceOverrunsAreBounded: overruns with no message between them
// make the source subscribe again maxOverruns times, then stop.
func TestLinkSourceOverrunsAreBounded(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	links := newFakeLinks()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time),
		Sources: Sources{NoHWErrors: true, NoEthtool: true, subscribeLinks: links.subscribe}})
	runMonitor(t, m)
	nextEvent(t, m)
	// Each fail needs a live subscription to take it.
	for range maxOverruns + 1 {
		links.fail(t, unix.ENOBUFS)
	}
	// The source ends a subscription only after it has opened the next
	// one, if any: once the last is ended, the count is final.
	links.waitEnded(t, maxOverruns)
	if n := links.subscriptions(); n != maxOverruns+1 {
		t.Fatalf("%d subscriptions, want %d", n, maxOverruns+1)
	}
}

func TestMonitorHardwareErrors(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	hw := newFakeSub()
	ticks := make(chan time.Time)
	var clock = struct {
		sync.Mutex
		now time.Time
	}{now: time.Unix(1_700_000_000, 0)}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.now }
	advance := func(d time.Duration) { clock.Lock(); defer clock.Unlock(); clock.now = clock.now.Add(d) }
	reg := prometheus.NewPedanticRegistry()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: ticks, Now: now, Registerer: reg,
		HWErrorLimit: 2, HWErrorWindow: time.Minute,
		Sources: Sources{NoLinkEvents: true, NoEthtool: true, openHWErrors: hw.opener()}})
	stop := runMonitor(t, m)
	nextEvent(t, m)

	// An error on a NIC not watched, and a malformed message, are dropped;
	// the next event is cxi0's.
	hw.send(t, hwErrorMessage(9, 0x10, 1), []byte{1})
	hw.send(t, hwErrorMessage(0, 0x2a8, 17))
	ev := nextEvent(t, m)
	wantErr := HWError{Dev: 0, CSRFlag: 0x2a8, Bit: 17}
	if ev.HWError == nil || *ev.HWError != wantErr || !ev.Healthy || ev.Status.HWErrors != 1 ||
		ev.Reason != "hardware error on cxi0: csr 0x2a8 bit 17 (1 so far); healthy" {
		t.Fatalf("first hardware error: %+v", ev)
	}
	if n := m.HWErrors("cxi0"); n != 1 {
		t.Fatalf("HWErrors = %d, want 1", n)
	}

	// Two more within the window: the third is more than the limit of 2.
	advance(10 * time.Second)
	hw.send(t, hwErrorMessage(0, 0x2a8, 17))
	if ev := nextEvent(t, m); !ev.Healthy || ev.Status.HWErrors != 2 {
		t.Fatalf("second hardware error: %+v", ev)
	}
	advance(10 * time.Second)
	hw.send(t, hwErrorMessage(0, 0x2a8, 18))
	ev = nextEvent(t, m)
	if ev.Healthy || !ev.Status.HWErrorBurst || ev.Status.HWErrors != 3 ||
		!strings.HasSuffix(ev.Reason, "more than 2 hardware errors within 1m0s") {
		t.Fatalf("third hardware error: %+v", ev)
	}
	// A poll inside the window changes nothing.
	tick(t, ticks)
	// Once the first two errors age out, the next poll finds it healthy.
	advance(45 * time.Second)
	tick(t, ticks)
	if ev := nextEvent(t, m); !ev.Healthy || ev.Status.HWErrorBurst || ev.Status.HWErrors != 3 || ev.HWError != nil {
		t.Fatalf("after the window: %+v", ev)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if mt.GetCounter() != nil {
				got[mf.GetName()] = mt.GetCounter().GetValue()
			} else {
				got[mf.GetName()] = mt.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{"slingshot_agent_nic_hw_errors_total": 3, "slingshot_agent_nic_healthy": 1, "slingshot_agent_nic_link_up": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("metric %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if rest := stop(); len(rest) != 0 {
		t.Fatalf("unexpected events: %+v", rest)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("metrics still registered after Run returned: %d families", len(mfs))
	}
}

// TestHWErrorSourceGoesOnAfterOverrun: an overrun on the cxierr socket
// loses notifications but not the subscription, which still delivers.
func TestHWErrorSourceGoesOnAfterOverrun(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	hw := newFakeSub()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time),
		Sources: Sources{NoLinkEvents: true, NoEthtool: true, openHWErrors: hw.opener()}})
	runMonitor(t, m)
	nextEvent(t, m)
	hw.fail(t, unix.ENOBUFS)
	hw.send(t, hwErrorMessage(0, 0x2a8, 17))
	if ev := nextEvent(t, m); ev.HWError == nil || ev.Status.HWErrors != 1 {
		t.Fatalf("after an overrun: %+v, want the hardware error", ev)
	}
}

func TestMonitorEthtool(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	eth := &fakeEthtool{info: EthtoolInfo{Driver: "cxi_eth", DriverVersion: "1.0", SpeedMbps: 200000, Duplex: "full", LinkDetected: true}}
	ticks := make(chan time.Time)
	log, logs := newLogger()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: ticks, Logger: log,
		Sources: Sources{NoLinkEvents: true, NoHWErrors: true,
			openEthtool: func() (ethtoolQuerier, error) { return eth, nil }}})
	stop := runMonitor(t, m)
	if ev := nextEvent(t, m); ev.Status.Ethtool != eth.info || !ev.Healthy {
		t.Fatalf("event = %+v, want ethtool info %+v", ev, eth.info)
	}
	eth.mu.Lock()
	eth.info, eth.err = EthtoolInfo{}, errFake
	eth.mu.Unlock()
	tick(t, ticks)
	// ethtool is informational: the change is reported, health stays.
	if ev := nextEvent(t, m); ev.Status.Ethtool != (EthtoolInfo{}) || !ev.Healthy {
		t.Fatalf("event = %+v, want empty ethtool info, healthy", ev)
	}
	tick(t, ticks)
	tick(t, ticks)
	stop()
	if n := logs.count("ethtool unavailable, continuing without it"); n != 1 {
		t.Errorf("ethtool failure logged %d times, want once:\n%s", n, logs)
	}
	eth.mu.Lock()
	defer eth.mu.Unlock()
	if !eth.closed {
		t.Error("ethtool querier not closed")
	}
}

func TestMonitorSourceFailuresDegrade(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	log, logs := newLogger()
	fail := func() (subscription, error) { return nil, errFake }
	failLinks := func(<-chan struct{}, func(error)) (<-chan linkUpdate, error) { return nil, errFake }
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time), Logger: log,
		Sources: Sources{subscribeLinks: failLinks, openHWErrors: fail,
			openEthtool: func() (ethtoolQuerier, error) { return nil, errFake }}})
	stop := runMonitor(t, m)
	if ev := nextEvent(t, m); !ev.Healthy {
		t.Fatalf("event = %+v, want healthy from sysfs alone", ev)
	}
	stop()
	for _, line := range []string{
		"netlink link events unavailable, continuing without it",
		"cxierr hardware error events unavailable, continuing without it",
		"ethtool unavailable, continuing without it",
	} {
		if logs.count(line) != 1 {
			t.Errorf("want one %q in:\n%s", line, logs)
		}
	}
}

func TestRunStopsWithContextAndClosesEvents(t *testing.T) {
	checkGoroutines(t)
	tr := newSysfsTree(t)
	hw := newFakeSub()
	links := newFakeLinks()
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time),
		Sources: Sources{NoEthtool: true, subscribeLinks: links.subscribe, openHWErrors: hw.opener()}})
	stop := runMonitor(t, m)
	nextEvent(t, m)
	// Nobody reads events now: hardware errors fill the buffer until the
	// loop blocks on sending and the pump blocks behind it. Cancel must
	// still stop everything.
	for range cap(m.events) + 2 {
		hw.send(t, hwErrorMessage(0, 1, 1))
	}
	stop()
	select {
	case <-hw.closed:
	default:
		t.Error("hardware-error subscription not closed")
	}
	if !links.ended(0) {
		t.Error("link subscription not closed")
	}
	if _, ok := <-m.Events(); ok {
		t.Fatal("Events not closed after Run returned")
	}
}

func TestRunTwiceAndInvalidTargets(t *testing.T) {
	tr := newSysfsTree(t)
	m := New(Config{Targets: []Target{tr.target()}, Ticks: make(chan time.Time), Sources: offline})
	stop := runMonitor(t, m)
	nextEvent(t, m)
	if err := m.Run(t.Context()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Run = %v, want ErrAlreadyStarted", err)
	}
	stop()

	for _, targets := range [][]Target{
		{{DeviceDir: "/x"}},
		{{NIC: "cxi0"}},
		{tr.target(), tr.target()},
	} {
		m := New(Config{Targets: targets, Sources: offline})
		if err := m.Run(t.Context()); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("Run(%+v) = %v, want ErrInvalidTarget", targets, err)
		}
		if _, ok := <-m.Events(); ok {
			t.Error("Events not closed after a failed Run")
		}
	}
}

func TestRunFailsOnMetricsConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "slingshot_agent_nic_link_up", Help: "taken"}))
	m := New(Config{Targets: []Target{newSysfsTree(t).target()}, Registerer: reg, Sources: offline})
	if err := m.Run(t.Context()); err == nil {
		t.Fatal("Run succeeded with a conflicting metric")
	}
	if mfs, _ := reg.Gather(); len(mfs) != 1 {
		t.Errorf("registry has %d families after a failed Run, want the 1 it had", len(mfs))
	}
}

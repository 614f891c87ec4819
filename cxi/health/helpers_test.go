package health

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitLimit bounds every wait in these tests; nothing here takes longer
// unless something is broken.
const waitLimit = 10 * time.Second

// sysfsTree is a fake sysfs with one NIC, cxi0, and its netdev, hsn0.
type sysfsTree struct {
	t    testing.TB
	root string
}

const (
	linkAttr   = "class/cxi/cxi0/device/properties/link"
	pctEqAttr  = "class/cxi/cxi0/device/properties/pct_eq"
	speedAttr  = "class/cxi/cxi0/device/properties/speed"
	operAttr   = "class/net/hsn0/operstate"
	netSpeed   = "class/net/hsn0/speed"
	rxErrsAttr = "class/net/hsn0/statistics/rx_errors"
)

// newSysfsTree writes a healthy NIC: link up, retry handler running,
// 200 Gb/s, netdev up.
func newSysfsTree(t testing.TB) *sysfsTree {
	tr := &sysfsTree{t: t, root: t.TempDir()}
	tr.set(linkAttr, "1\n")
	tr.set(pctEqAttr, "1\n")
	tr.set(speedAttr, "200000\n")
	tr.set("class/cxi/cxi0/device/properties/nid", "0x12\n")
	tr.set(operAttr, "up\n")
	tr.set(netSpeed, "200000\n")
	tr.set(rxErrsAttr, "0\n")
	tr.set("class/net/hsn0/statistics/tx_errors", "0\n")
	tr.set("class/net/hsn0/carrier_changes", "1\n")
	return tr
}

// set writes one attribute atomically (write and rename), so a poll running
// at the same time reads the old or the new value, never half of one.
func (tr *sysfsTree) set(rel, value string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *sysfsTree) target() Target {
	return Target{
		NIC:       "cxi0",
		NetDev:    "hsn0",
		DeviceDir: filepath.Join(tr.root, "class/cxi/cxi0/device"),
		NetDir:    filepath.Join(tr.root, "class/net/hsn0"),
	}
}

// fakeSub is a subscription the test feeds. Receive returns what is sent on
// msgs or errs, and net.ErrClosed once Close was called.
type fakeSub struct {
	msgs   chan [][]byte
	errs   chan error
	closed chan struct{}
	once   sync.Once
}

func newFakeSub() *fakeSub {
	return &fakeSub{msgs: make(chan [][]byte), errs: make(chan error), closed: make(chan struct{})}
}

func (f *fakeSub) Receive() ([][]byte, error) {
	select {
	case m := <-f.msgs:
		return m, nil
	case err := <-f.errs:
		return nil, err
	case <-f.closed:
		return nil, net.ErrClosed
	}
}

func (f *fakeSub) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeSub) opener() func() (subscription, error) {
	return func() (subscription, error) { return f, nil }
}

// send hands messages to the monitor's pump, failing when nobody takes them.
func (f *fakeSub) send(t testing.TB, msgs ...[]byte) {
	t.Helper()
	select {
	case f.msgs <- msgs:
	case <-time.After(waitLimit):
		t.Fatal("the monitor did not receive from the subscription")
	}
}

func (f *fakeSub) fail(t testing.TB, err error) {
	t.Helper()
	select {
	case f.errs <- err:
	case <-time.After(waitLimit):
		t.Fatal("the monitor did not receive from the subscription")
	}
}

// fakeEthtool answers every query with info, or err for the named netdev.
type fakeEthtool struct {
	mu     sync.Mutex
	info   EthtoolInfo
	err    error
	closed bool
}

func (f *fakeEthtool) Query(string) (EthtoolInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info, f.err
}

func (f *fakeEthtool) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// fakeLinks is a link subscriber the test feeds, with the library's
// contract: a subscription passes on what is sent on updates, reports what
// is sent on soft and goes on, reports what is sent on fatal and ends, and
// ends when its done channel is closed. Each subscription's goroutine
// ends with it.
type fakeLinks struct {
	updates chan linkUpdate
	soft    chan error
	fatal   chan error

	mu    sync.Mutex // guards dones
	dones []<-chan struct{}
}

func newFakeLinks() *fakeLinks {
	return &fakeLinks{updates: make(chan linkUpdate), soft: make(chan error), fatal: make(chan error)}
}

func (f *fakeLinks) subscribe(done <-chan struct{}, onErr func(error)) (<-chan linkUpdate, error) {
	f.mu.Lock()
	f.dones = append(f.dones, done)
	f.mu.Unlock()
	out := make(chan linkUpdate)
	go func() {
		defer close(out)
		for {
			select {
			case u := <-f.updates:
				select {
				case out <- u:
				case <-done:
					return
				}
			case err := <-f.soft:
				onErr(err)
			case err := <-f.fatal:
				onErr(err)
				return
			case <-done:
				return
			}
		}
	}()
	return out, nil
}

// subscriptions returns how many subscriptions were made.
func (f *fakeLinks) subscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dones)
}

// ended reports whether subscription i (from 0) has been ended.
func (f *fakeLinks) ended(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.dones) {
		return false
	}
	select {
	case <-f.dones[i]:
		return true
	default:
		return false
	}
}

// waitEnded waits until the monitor has ended subscription i (from 0).
func (f *fakeLinks) waitEnded(t testing.TB, i int) {
	t.Helper()
	f.mu.Lock()
	var done <-chan struct{}
	if i < len(f.dones) {
		done = f.dones[i]
	}
	f.mu.Unlock()
	if done == nil {
		t.Fatalf("no subscription %d", i)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("subscription %d not ended", i)
	}
}

// send hands an update to the current subscription, failing when none
// takes it.
func (f *fakeLinks) send(t testing.TB, u linkUpdate) {
	t.Helper()
	sendWithin(t, f.updates, u, "an update")
}

// fail ends the current subscription with err, as a failed receive does.
func (f *fakeLinks) fail(t testing.TB, err error) {
	t.Helper()
	sendWithin(t, f.fatal, err, "an error that ends it")
}

// warn reports err on the current subscription, which goes on.
func (f *fakeLinks) warn(t testing.TB, err error) {
	t.Helper()
	sendWithin(t, f.soft, err, "an error")
}

func sendWithin[T any](t testing.TB, ch chan<- T, v T, what string) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(waitLimit):
		t.Fatalf("no link subscription took %s", what)
	}
}

// nlAttr encodes one netlink attribute, padded as the kernel pads it.
func nlAttr(typ uint16, value []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(value)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nlU32(typ uint16, v uint32) []byte { return nlAttr(typ, binary.NativeEndian.AppendUint32(nil, v)) }

// genlPayload encodes a generic-netlink message's payload: the header
// (command, version 1, reserved), then the attributes.
func genlPayload(cmd uint8, attrs ...[]byte) []byte {
	b := []byte{cmd, 1, 0, 0}
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

// hwErrorMessage encodes a cxierr notification's payload the way the
// driver builds one: CSR_FLG, BIT, then DEV_NUM.
func hwErrorMessage(dev, csr uint32, bit uint8) []byte {
	return genlPayload(cxierrCmdErrMsg, nlU32(cxierrAttrCSRFlg, csr), nlAttr(cxierrAttrBit, []byte{bit}), nlU32(cxierrAttrDevNum, dev))
}

// nextEvent returns the next event, failing when none comes or the channel
// is closed.
func nextEvent(t testing.TB, m *Monitor) Event {
	t.Helper()
	select {
	case ev, ok := <-m.Events():
		if !ok {
			t.Fatal("events closed")
		}
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no event")
	}
	return Event{}
}

// tick sends one poll tick; it returns once the monitor's loop has taken it,
// which means the previous poll has finished.
func tick(t testing.TB, ticks chan<- time.Time) {
	t.Helper()
	select {
	case ticks <- time.Time{}:
	case <-time.After(waitLimit):
		t.Fatal("the monitor did not take a tick")
	}
}

// runMonitor starts m.Run and returns a stop function that cancels it,
// waits for Run to return nil and returns the events that were still
// undelivered.
func runMonitor(t testing.TB, m *Monitor) (stop func() []Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	var rest []Event
	stop = func() []Event {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitLimit):
				t.Fatal("Run did not return after cancel")
			}
			for ev := range m.Events() {
				rest = append(rest, ev)
			}
		})
		return rest
	}
	t.Cleanup(func() { stop() })
	return stop
}

// logBuffer is a slog handler target that tests can search once the
// monitor has stopped.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) count(sub string) int { return strings.Count(l.String(), sub) }

func newLogger() (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// checkGoroutines fails the test, at cleanup, when more goroutines run
// than at the start. Goroutines that have just returned may still be
// counted for a moment, so it yields until the count drops or waitLimit.
func checkGoroutines(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(waitLimit)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("%d goroutines, %d at start:\n%s", runtime.NumGoroutine(), base, buf[:n])
				return
			}
			runtime.Gosched()
		}
	})
}

// errFake is an error a fake source returns.
var errFake = errors.New("fake source failure")

package hsnlink

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/testenv"
)

// ioTimeout bounds each network step of the reachability tests, so that a
// broken path fails the test instead of hanging it. Deadlines, not sleeps.
const ioTimeout = 10 * time.Second

// TestPodsReachEachOther: two pods' macvlan children on one parent talk
// TCP through it (bridge mode switches between siblings).
func TestPodsReachEachOther(t *testing.T) {
	testReach(t, Macvlan)
}

// TestIPVLAN: where the kernel has no ipvlan (this one), Attach says so
// clearly and leaves nothing behind; where it has, ipvlan children reach
// each other as macvlan ones do.
func TestIPVLAN(t *testing.T) {
	e := newEnv(t)
	hostBefore := e.hostLinks()
	pod := testenv.NewNetNS(t)
	s := spec("10.150.3.7/16")
	s.Mode = IPVLAN
	err := e.attach(pod, s)
	if err == nil {
		t.Log("the kernel has ipvlan: testing it as macvlan")
		testReach(t, IPVLAN)
		return
	}
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "the kernel has no ipvlan support") {
		t.Fatalf("Attach of ipvlan = %v, want ErrNotSupported saying the kernel has no ipvlan support", err)
	}
	for _, w := range []string{"parent hsn0", "address 10.150.3.7/16", "netns "} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	if got := linkNames(t, nlIn(t, pod)); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("pod's links = %v, want [lo]", got)
	}
	if got := e.hostLinks(); !slices.Equal(got, hostBefore) {
		t.Errorf("host's links = %v, were %v", got, hostBefore)
	}
}

func testReach(t *testing.T, mode Mode) {
	e := newEnv(t)
	server, client := testenv.NewNetNS(t), testenv.NewNetNS(t)
	addrs := map[*os.File]string{server: "10.150.3.7/16", client: "10.150.3.8/16"}
	for ns, a := range addrs {
		s := spec(a)
		s.Mode = mode
		if err := e.attach(ns, s); err != nil {
			t.Fatalf("Attach %s: %v", a, err)
		}
	}
	serverAddr := netip.MustParsePrefix(addrs[server]).Addr()

	var ln net.Listener
	err := testenv.InNetNS(server, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(serverAddr, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("listen in the server pod: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	served := make(chan error, 1)
	go func() { served <- echoOnce(ln) }()

	var conn net.Conn
	err = testenv.InNetNS(client, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), ioTimeout)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from the client pod: %v", ln.Addr(), err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	if got := conn.LocalAddr().(*net.TCPAddr).IP.String(); got != "10.150.3.8" {
		t.Errorf("client's source address = %s, want its hsn address 10.150.3.8", got)
	}
	msg := []byte("hello over hsn")
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if string(got) != string(msg) {
		t.Errorf("echo = %q, want %q", got, msg)
	}
	if err := <-served; err != nil {
		t.Errorf("server: %v", err)
	}
}

// echoOnce accepts one connection on ln and echoes what it reads until
// the peer's data is echoed in full or the deadline passes.
func echoOnce(ln net.Listener) error {
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return err
	}
	buf := make([]byte, len("hello over hsn"))
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	_, err = c.Write(buf)
	return err
}

package agent

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/ipam"
	"github.com/slingshot-k8s/slingshot/agent/ipam/ipamtest"
)

// Issue 24, defect 5: the IPAM socket server's error was read only at
// exit, so the server could die while the agent stayed ready. Its
// failure now ends runIPAM at once, with the error, which stops the
// agent.
func TestDefect5IPAMServerFailureStopsTheAgent(t *testing.T) {
	dir := t.TempDir()
	alloc, err := ipam.New(ipam.Options{StatePath: filepath.Join(dir, IPAMStateName), Slicer: ipamtest.NewController().Node("n1"), Logger: testLoggerDiscard()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "ipam.sock"))
	if err != nil {
		t.Fatal(err)
	}
	a := &parts{opts: Options{IPAMSocket: filepath.Join(dir, "ipam.sock")}, logger: testLoggerDiscard(),
		ipam: alloc, ipamSrv: newHTTPServer(alloc.Handler()), ipamLis: lis}
	_ = lis.Close() // the socket's server fails at once
	// A deadline turns "runs until the agent stops" into a failure rather
	// than a hung test.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = a.runIPAM(ctx)
	if ctx.Err() != nil {
		t.Fatal("runIPAM ran on after its socket's server failed")
	}
	if err == nil || !strings.Contains(err.Error(), "ipam socket") {
		t.Fatalf("runIPAM = %v, want the socket's error", err)
	}
}

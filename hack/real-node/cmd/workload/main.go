// Command workload is the real node's test pod program. Without
// arguments it prints the Slingshot environment it was started with (from
// CDI) and the env file the agent published in its per-container
// directory, then waits for SIGTERM. Tests read the same values from
// /proc; the printout is for a person running `kubectl logs` on the demo
// node.
//
// Two more modes test TCP over the pod's hsn interface:
//
//	workload serve PORT      listen on PORT on every address; answer each
//	                         connection with one line naming the pod's hsn
//	                         address and the caller's; until SIGTERM
//	workload dial ADDR:PORT  connect, retrying until DIAL_TIMEOUT (a Go
//	                         duration, default 60s), print the answer and
//	                         exit 0; exit 1 with the last error past it
//
// The hsn interface is HSN_INTERFACE, default hsn0.
//
// With SIM_STATE_DIR set (a read-only mount of the simulated CXI driver's
// state, the agent's state directory + "/cxi-sim"), the first mode also
// prints, before anything else, one line per service named by
// SLINGSHOT_DEVICES and SLINGSHOT_SVC_IDS, as the driver holds it at that
// moment, with the network namespace the program runs in:
//
//	svccheck {"nic":"cxi0","id":3,"enabled":true,"netns":[4026532500],...,"self":4026532500}
//
// which shows what a service was when the container's own code first ran.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// envFile is agent.ContainerDir + "/" + agent.EnvFileName.
const envFile = "/var/run/slingshot/slingshot.env"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	args := os.Args[1:]
	var err error
	switch {
	case len(args) == 0:
		if dir := os.Getenv("SIM_STATE_DIR"); dir != "" {
			checkServices(dir)
		}
		printEnv()
		<-ctx.Done()
	case len(args) == 2 && args[0] == "serve":
		err = serve(ctx, args[1])
	case len(args) == 2 && args[0] == "dial":
		err = dial(ctx, args[1])
	default:
		err = errors.New("usage: workload [serve PORT | dial ADDR:PORT]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

func printEnv() {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLINGSHOT_") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	fmt.Println("environment:")
	for _, kv := range env {
		fmt.Println("  " + kv)
	}
	if b, err := os.ReadFile(envFile); err != nil {
		fmt.Printf("%s: %v\n", envFile, err)
	} else {
		fmt.Printf("%s:\n%s", envFile, b)
	}
}

// serviceCheck is one svccheck line.
type serviceCheck struct {
	simstate.Service
	// Found says whether the driver has the service; Error why it could
	// not be read.
	Found bool   `json:"found"`
	Error string `json:"error,omitempty"`
	// Self is the inode of the network namespace the program runs in.
	Self uint32 `json:"self"`
}

// checkServices prints one svccheck line per service of the container.
func checkServices(dir string) {
	self := ownNetns()
	nics := splitList(os.Getenv("SLINGSHOT_DEVICES"))
	ids := splitList(os.Getenv("SLINGSHOT_SVC_IDS"))
	if len(nics) != len(ids) {
		fmt.Printf("svccheck {\"error\":%q}\n", fmt.Sprintf("SLINGSHOT_DEVICES %v and SLINGSHOT_SVC_IDS %v differ in length", nics, ids))
		return
	}
	for i, nic := range nics {
		c := serviceCheck{Self: self}
		c.NIC = nic
		id, err := strconv.ParseUint(ids[i], 10, 32)
		if err != nil {
			c.Error = fmt.Sprintf("SLINGSHOT_SVC_IDS: %v", err)
		} else {
			c.ID = uint32(id)
			svc, ok, err := simstate.Find(dir, nic, c.ID)
			switch {
			case err != nil:
				c.Error = err.Error()
			case ok:
				c.Service, c.Found = svc, true
			}
		}
		b, _ := json.Marshal(c)
		fmt.Printf("svccheck %s\n", b)
	}
}

// ownNetns returns the inode of the program's network namespace, 0 when
// it cannot be read.
func ownNetns() uint32 {
	link, err := os.Readlink("/proc/self/ns/net") // "net:[4026532500]"
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 32)
	return uint32(n)
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func hsnName() string {
	if n := os.Getenv("HSN_INTERFACE"); n != "" {
		return n
	}
	return "hsn0"
}

// hsnAddrs lists the IPv4 addresses of the hsn interface with their
// prefix lengths, "10.150.0.2/16", or says why there are none.
func hsnAddrs() string {
	name := hsnName()
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			out = append(out, ipn.String())
		}
	}
	if len(out) == 0 {
		return name + ": no IPv4 address"
	}
	return name + " " + strings.Join(out, ",")
}

// serve answers every connection on port with one line:
// "hello from hsn0 10.150.0.2/16 to 10.150.200.7:41234".
func serve(ctx context.Context, port string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		return err
	}
	fmt.Printf("serving on %s; %s\n", ln.Addr(), hsnAddrs())
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		line := fmt.Sprintf("hello from %s to %s", hsnAddrs(), c.RemoteAddr())
		fmt.Println(line)
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = fmt.Fprintln(c, line)
		c.Close()
	}
}

// dial connects to addr until DIAL_TIMEOUT, reads one line and prints it.
func dial(ctx context.Context, addr string) error {
	bound := 60 * time.Second
	if s := os.Getenv("DIAL_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("DIAL_TIMEOUT: %w", err)
		}
		bound = d
	}
	fmt.Printf("dialing %s; %s\n", addr, hsnAddrs())
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var d net.Dialer
	var last error
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(actx, "tcp", addr)
		acancel()
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if rerr == nil {
				fmt.Printf("reply from %s (attempt %d): %s", addr, attempt, line)
				return nil
			}
			err = fmt.Errorf("read: %w", rerr)
		}
		// The attempt the bound cuts short ends in a timeout: keep the
		// error before it.
		if ne, ok := err.(net.Error); last == nil || !ok || !ne.Timeout() {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dial %s: no answer within %s (%d attempts); last error: %v", addr, bound, attempt, last)
		case <-tick.C:
		}
	}
}

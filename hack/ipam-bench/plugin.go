package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// podIf is the pod's interface the attachments are for.
const podIf = "net1"

// plugin is one IPAM plugin binary and the configuration a runtime would
// hand it (the main plugin's network configuration, which carries "ipam").
type plugin struct {
	name, about string
	bin         string
	conf        []byte
	// cniPath is CNI_PATH; netns is CNI_NETNS, a path no plugin opens
	// (IPAM plugins do not enter the pod's namespace).
	cniPath, netns string
	// env is added to the plugin's environment beside the CNI variables.
	env []string
	// inRange checks an address ADD returned.
	inRange func(netip.Prefix) error
	// verify runs after the timed cycles: nothing may be left allocated.
	verify func(context.Context) error
	// counters, when set, reads counters the timed cycles move (the API
	// server's requests by verb).
	counters func(context.Context) (map[string]float64, error)
	// exec runs the binary, its stderr (where whereabouts logs at debug
	// level by default) to a file, as a runtime captures it.
	exec invoke.Exec
	lat  latencies
}

type latencies struct{ add, del []time.Duration }

// cniArgs are CNI's variables plus the plugin's own environment.
type cniArgs struct {
	*invoke.Args
	extra []string
}

func (a cniArgs) AsEnv() []string { return append(a.Args.AsEnv(), a.extra...) }

func (p *plugin) args(verb, id string) invoke.CNIArgs {
	pod := "pod-" + id
	return cniArgs{Args: &invoke.Args{
		Command:     verb,
		ContainerID: id,
		NetNS:       p.netns,
		IfName:      podIf,
		Path:        p.cniPath,
		// What containerd passes (pkg/cri's CNI_ARGS).
		PluginArgsStr: "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + pod +
			";K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_UID=uid-" + id,
	}, extra: p.env}
}

// cycle runs one ADD and one DEL for container id, recording both
// latencies in lat when it is not nil.
func (p *plugin) cycle(ctx context.Context, id string, lat *latencies) error {
	start := time.Now()
	r, err := invoke.ExecPluginWithResult(ctx, p.bin, p.conf, p.args("ADD", id), p.exec)
	addTook := time.Since(start)
	if err != nil {
		return fmt.Errorf("ADD %s: %w", id, err)
	}
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("ADD %s: result: %w", id, err)
	}
	if len(res.IPs) != 1 {
		return fmt.Errorf("ADD %s: %d addresses, want 1: %v", id, len(res.IPs), res)
	}
	addr, ok := netip.AddrFromSlice(res.IPs[0].Address.IP)
	if !ok {
		return fmt.Errorf("ADD %s: address %v", id, res.IPs[0].Address)
	}
	bits, _ := res.IPs[0].Address.Mask.Size()
	if err := p.inRange(netip.PrefixFrom(addr.Unmap(), bits)); err != nil {
		return fmt.Errorf("ADD %s: %w", id, err)
	}
	start = time.Now()
	err = invoke.ExecPluginWithoutResult(ctx, p.bin, p.conf, p.args("DEL", id), p.exec)
	delTook := time.Since(start)
	if err != nil {
		return fmt.Errorf("DEL %s: %w", id, err)
	}
	if lat != nil {
		lat.add = append(lat.add, addTook)
		lat.del = append(lat.del, delTook)
	}
	return nil
}

// within returns an inRange that wants an address of p with the pool's
// prefix length.
func within(p netip.Prefix) func(netip.Prefix) error {
	return func(a netip.Prefix) error {
		if !p.Contains(a.Addr()) || a.Bits() != hsn0.Prefix.Bits() {
			return fmt.Errorf("address %v is not one of %v with the pool's length /%d", a, p, hsn0.Prefix.Bits())
		}
		return nil
	}
}

// stderrTo returns an invoke.Exec whose plugins write stderr to a new
// file at path; close closes it.
func stderrTo(path string) (e invoke.Exec, close func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: f}, PluginDecoder: version.PluginDecoder{}}, func() { f.Close() }, nil
}

type summary struct{ p50, p99, mean, max time.Duration }

// summarize returns the nearest-rank percentiles (as BenchmarkAdd in
// cni/ipamplugin reports them), the mean and the maximum.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	s := slices.Sorted(slices.Values(d))
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	pct := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	return summary{p50: pct(0.50), p99: pct(0.99), mean: sum / time.Duration(len(s)), max: s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func numCPU() int { return runtime.NumCPU() }

// debVersion names a Debian package with its installed version.
func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", pkg).Output()
	if err != nil || len(out) == 0 {
		return pkg + " (version unknown)"
	}
	return "Debian " + pkg + " " + strings.TrimSpace(string(out))
}

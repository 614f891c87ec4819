// Command ipam-bench quotes CNI ADD and DEL latency (p50, p99) of three
// IPAM plugins in one run, each binary executed as a runtime executes it
// (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH,
// CNI_ARGS, the network configuration on stdin):
//
//   - slingshot-ipam: the project's plugin, built from this tree, asking
//     the node agent's real allocator (agent/ipam) on a unix socket; the
//     allocator's slices come from ipamtest's controller stand-in;
//   - whereabouts: github.com/k8snetworkplumbingwg/whereabouts, built
//     from the module proxy, in node-slice ("fast IPAM") mode against a
//     real kube-apiserver on a real etcd, its CRDs installed from its
//     module source and the node's slice assigned by its own
//     nodeslicecontroller;
//   - host-local: Debian's host-local (containernetworking-plugins), its
//     store under the run's directory: the baseline of a node-local
//     plugin that allocates from files itself.
//
// The plugins take turns: cycle i runs one ADD then one DEL of each, the
// order rotating, so that background load falls on all of them alike.
//
//	cd hack/ipam-bench && go run .
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	n := flag.Int("n", 500, "timed ADD+DEL cycles per plugin (1-5000)")
	warmup := flag.Int("warmup", 10, "untimed ADD+DEL cycles per plugin before timing")
	root := flag.String("root", "../..", "the slingshot repository (slingshot-ipam is built there)")
	kubeAPIServer := flag.String("kube-apiserver", "", "kube-apiserver binary (default: $KUBE_APISERVER, else <root>/hack/kube-apiserver/bin/kube-apiserver, else <root>/hack/real-node/bin/kube-apiserver)")
	etcd := flag.String("etcd", "/usr/bin/etcd", "etcd binary")
	wbVersion := flag.String("whereabouts", "v0.9.2", "whereabouts module version to build from the module proxy")
	hostLocal := flag.String("host-local", "/usr/lib/cni/host-local", "host-local binary (apt-get install containernetworking-plugins)")
	only := flag.String("plugins", "slingshot-ipam,whereabouts,host-local", "plugins to run, comma-separated")
	keep := flag.Bool("keep", false, "keep the work directory (logs, stores) after the run")
	flag.Parse()
	if *n < 1 || *n > 5000 || *warmup < 0 || *warmup > 1000 {
		fatalf("-n must be 1-5000 and -warmup 0-1000")
	}
	rootAbs, err := filepath.Abs(*root)
	if err != nil {
		fatalf("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "ipam-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	var cleanups []func()
	cleanup := func() {
		for _, f := range slices.Backward(cleanups) {
			f()
		}
		if *keep {
			fmt.Fprintf(os.Stderr, "work directory kept: %s\n", work)
		} else {
			os.RemoveAll(work)
		}
	}
	defer cleanup()
	fail := func(format string, a ...any) {
		cleanup()
		fatalf(format, a...)
	}

	var plugins []*plugin
	for name := range strings.SplitSeq(*only, ",") {
		var p *plugin
		var done func()
		var err error
		start := time.Now()
		switch strings.TrimSpace(name) {
		case "slingshot-ipam":
			p, done, err = setupSlingshot(ctx, rootAbs, filepath.Join(work, "slingshot"))
		case "whereabouts":
			bin := *kubeAPIServer
			if bin == "" {
				bin = findKubeAPIServer(rootAbs)
			}
			p, done, err = setupWhereabouts(ctx, wbOptions{
				Version: *wbVersion, KubeAPIServer: bin, Etcd: *etcd, Dir: filepath.Join(work, "whereabouts"),
			})
		case "host-local":
			p, done, err = setupHostLocal(*hostLocal, filepath.Join(work, "host-local"))
		default:
			fail("unknown plugin %q", name)
		}
		if done != nil {
			cleanups = append(cleanups, done)
		}
		if err != nil {
			fail("%s: %v", name, err)
		}
		e, closeLog, err := stderrTo(filepath.Join(work, p.name+".stderr.log"))
		if err != nil {
			fail("%v", err)
		}
		p.exec = e
		cleanups = append(cleanups, closeLog)
		fmt.Fprintf(os.Stderr, "%s: ready in %v (%s)\n", p.name, time.Since(start).Round(time.Millisecond), p.about)
		plugins = append(plugins, p)
	}

	for _, p := range plugins {
		for i := range *warmup {
			if err := p.cycle(ctx, fmt.Sprintf("warm-%d", i), nil); err != nil {
				fail("%s warm-up: %v", p.name, err)
			}
		}
	}
	before := map[*plugin]map[string]float64{}
	for _, p := range plugins {
		if p.counters != nil {
			c, err := p.counters(ctx)
			if err != nil {
				fail("%s: %v", p.name, err)
			}
			before[p] = c
		}
	}
	fmt.Fprintf(os.Stderr, "timing %d ADD+DEL cycles per plugin, in turns\n", *n)
	start := time.Now()
	for i := range *n {
		for k := range plugins {
			p := plugins[(i+k)%len(plugins)]
			if err := p.cycle(ctx, fmt.Sprintf("bench-%d", i), &p.lat); err != nil {
				fail("%s cycle %d: %v", p.name, i, err)
			}
		}
	}
	elapsed := time.Since(start)
	perCycle := map[*plugin]string{}
	for _, p := range plugins {
		if p.counters == nil {
			continue
		}
		c, err := p.counters(ctx)
		if err != nil {
			fail("%s: %v", p.name, err)
		}
		var parts []string
		var total float64
		for _, k := range slices.Sorted(maps.Keys(c)) {
			if d := (c[k] - before[p][k]) / float64(*n); d >= 0.05 {
				parts = append(parts, fmt.Sprintf("%s %.1f", k, d))
				total += d
			}
		}
		perCycle[p] = fmt.Sprintf("%.1f API requests per ADD+DEL (%s)", total, strings.Join(parts, ", "))
	}
	for _, p := range plugins {
		if p.verify != nil {
			if err := p.verify(ctx); err != nil {
				fail("%s after the run: %v", p.name, err)
			}
		}
	}

	host, _ := os.Hostname()
	ncpu, load := cpuInfo()
	fmt.Printf("ipam-bench: %d ADD+DEL cycles per plugin in turns (after %d untimed), %v in all; %s, %d CPUs, load average %s\n\n",
		*n, *warmup, elapsed.Round(time.Millisecond), host, ncpu, load)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plugin\tADD p50\tADD p99\tADD mean\tADD max\tDEL p50\tDEL p99\tDEL mean\t")
	for _, p := range plugins {
		a, d := summarize(p.lat.add), summarize(p.lat.del)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.name, ms(a.p50), ms(a.p99), ms(a.mean), ms(a.max), ms(d.p50), ms(d.p99), ms(d.mean))
	}
	tw.Flush()
	fmt.Println()
	for _, p := range plugins {
		fmt.Printf("%s: %s\n", p.name, p.about)
		if c, ok := perCycle[p]; ok {
			fmt.Printf("%s: %s\n", p.name, c)
		}
	}
}

func findKubeAPIServer(root string) string {
	if b := os.Getenv("KUBE_APISERVER"); b != "" {
		return b
	}
	cands := []string{
		filepath.Join(root, "hack", "kube-apiserver", "bin", "kube-apiserver"),
		filepath.Join(root, "hack", "real-node", "bin", "kube-apiserver"),
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	return cands[0]
}

func cpuInfo() (int, string) {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	load := "?"
	if len(f) >= 3 {
		load = strings.Join(f[:3], " ")
	}
	return numCPU(), load
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "ipam-bench: "+format+"\n", a...)
	os.Exit(1)
}

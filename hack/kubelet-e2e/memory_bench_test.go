package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"
)

var (
	memoryPods     = flag.Int("memory.pods", 10000, "BenchmarkAgentMemory: pods started and ended (10,000 is the figure to quote)")
	memoryBatch    = flag.Int("memory.batch", 64, "BenchmarkAgentMemory: pods running at once (at most the node's 4 NICs × 16 shares)")
	memoryParallel = flag.Int("memory.parallel", 4, "BenchmarkAgentMemory: pods started side by side")
)

// Limits of BenchmarkAgentMemory.
const (
	// memoryIdleAnonLimit is the most anonymous memory (heap, stacks,
	// the Go runtime's own) the agent may hold idle after registering
	// 4 NICs.
	memoryIdleAnonLimit = 16 << 20
	// memoryAnonTolerance is how much the agent's anonymous memory may
	// rise from the warm-up sample (a fifth of the pods: the 2,000th of
	// 10,000) to the end, along the least-squares line through the
	// samples: from one sample to the next it moves by about 1 MiB
	// either way with the heap between collections, while a leak of a
	// pod's record (a kilobyte or more) adds 8 MiB over 8,000 pods.
	memoryAnonTolerance = 2 << 20
	// memoryGoroutineSlack is how many more goroutines the agent may run
	// at the end than at the warm-up sample (connections and timers that
	// come and go; a goroutine left per pod adds thousands).
	memoryGoroutineSlack = 5
	// memoryFDSlack is the same for open files (a connection).
	memoryFDSlack = 2
)

// memorySample is the agent's memory, goroutines and open files at one
// point.
type memorySample struct {
	pods       int // pods started and ended before it
	mem        harness.Memory
	heapInuse  float64 // go_memstats_heap_inuse_bytes
	heapGoal   float64 // go_memstats_next_gc_bytes: the goal the last GC set
	goMapped   float64 // go_memstats_sys_bytes - go_memstats_heap_released_bytes
	goroutines float64
	fds        float64 // process_open_fds
}

// The agent's series the benchmark reads.
const (
	seriesRunning  = `slingshot_agent_pods{state="running"}`
	seriesCleanup  = `slingshot_agent_pods{state="cleanup"}`
	seriesAcquired = `slingshot_agent_controller_request_duration_seconds_count{op="acquire",result="ok"}`
	seriesReleased = `slingshot_agent_controller_request_duration_seconds_count{op="release",result="ok"}`
)

// BenchmarkAgentMemory measures the agent's resident memory idle and over
// -memory.pods pod starts and exits (10,000 is the figure to quote): the
// agent binary built as it ships (static, stripped, no race detector),
// the simulated driver and 4 NICs, under the kubelet's own device
// manager. The remote run is the image's default build, leasing VNIs
// from a cluster controller (run by the benchmark, over mTLS, as the
// chart configures it: no pod VNI range, so each pod's VNI is a
// controller call); the embedded run carries the controller and its
// sqlite database in the agent's process (single-node clusters, make
// demo).
//
// Each pod is admitted (Allocate, then PreStart binds its service in a
// network namespace of its own), -memory.parallel side by side and
// -memory.batch at a time; then the batch ends: each sandbox goes, the
// kubelet frees the devices, and the agent destroys the services and
// releases the VNIs while the next batch starts (at most one batch
// behind).
//
// The agent's memory is read from /proc/<pid>/status (RssAnon, RssFile,
// RssShmem), with its Go heap, goroutines and open files from its
// /metrics, idle after registration and after every tenth of the pods,
// each time once the agent has cleaned up every pod and then listed the
// kubelet's pods ten times with nothing to do. Nothing forces a GC. It
// fails when the idle anonymous memory is over 16 MiB, when the
// anonymous memory rises by more than 2 MiB from the warm-up sample (the
// 2,000th of 10,000 pods) to the end, or when goroutines or open files
// grow over the same stretch. Each run is one iteration whatever b.N is:
// run it with -benchtime 1x (make bench-memory).
func BenchmarkAgentMemory(b *testing.B) {
	b.Run("remote", func(b *testing.B) { benchAgentMemory(b, false) })
	b.Run("embedded", func(b *testing.B) { benchAgentMemory(b, true) })
}

func benchAgentMemory(b *testing.B, embedded bool) {
	pods, batch, parallel := *memoryPods, *memoryBatch, *memoryParallel
	const nics, shares = 4, 16
	if pods < 10 || batch < 1 || batch > nics*shares || parallel < 1 {
		b.Fatalf("-memory.pods %d (at least 10), -memory.batch %d (1..%d), -memory.parallel %d (at least 1)", pods, batch, nics*shares, parallel)
	}
	buildStart := time.Now()
	raceBin := harness.AgentBin
	if err := harness.BuildAgentWith(b.TempDir(), harness.Build{Shipped: true, NoEmbeddedController: !embedded}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { harness.AgentBin = raceBin })
	b.Logf("agent built in %v", time.Since(buildStart).Round(time.Second))
	quietKlog(b)

	ctx := b.Context()
	all := make([]*v1.Pod, pods)
	for i := range all {
		all[i] = harness.NewPod("mem", fmt.Sprintf("p-%05d", i), 1, nil)
	}
	n := harness.NewNode(b, "node-mem", nics, 2)
	cfg := fmt.Sprintf("nicResource: {sharesPerNIC: %d}\npodResources: {pollInterval: 100ms}\nhealth: {pollInterval: 100ms}\ncdi: {specDir: %s}\n", shares, n.CDIDir)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	var flags []string
	if !embedded {
		pki := harness.NewPKI(b)
		addr, _ := harness.StartControllerWith(b, ctx, pki, all, nil, controller.Config{})
		cert, key := pki.Issue(b, "slingshot-agent:"+n.Name)
		flags = []string{"--controller", addr, "--controller-ca-file", pki.CAFile, "--controller-cert-file", cert, "--controller-key-file", key}
	}
	n.StartKubelet(ctx)
	agent := n.StartAgent(flags...)
	harness.Eventually(b, 10*time.Second, "registered", func() (bool, string) {
		c, a := n.Kubelet.Capacity(nicResource)
		return c == nics*shares && a == nics*shares, itoa(c) + "/" + itoa(a)
	})

	scrape := func() map[string]float64 {
		b.Helper()
		m, err := agent.Scrape(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{seriesRunning, seriesCleanup, seriesAcquired, seriesReleased, "go_memstats_heap_inuse_bytes",
			"go_memstats_next_gc_bytes", "go_memstats_sys_bytes", "go_memstats_heap_released_bytes", "go_goroutines", "process_open_fds"} {
			if _, ok := m[name]; !ok {
				b.Fatalf("the agent's /metrics has no %s", name)
			}
		}
		return m
	}
	// released waits until the agent has released the VNIs of the first
	// count pods and, with all, serves no pod and has left no service.
	released := func(count int, all bool) {
		b.Helper()
		harness.Eventually(b, time.Minute, fmt.Sprintf("the first %d pods cleaned up", count), func() (bool, string) {
			m := scrape()
			if rel := int(m[seriesReleased]); rel < count {
				return false, fmt.Sprintf("%d of %d VNIs released, %.0f pods running, %.0f cleaning up", rel, count, m[seriesRunning], m[seriesCleanup])
			}
			if !all {
				return true, ""
			}
			if m[seriesRunning] != 0 || m[seriesCleanup] != 0 {
				return false, fmt.Sprintf("%.0f pods running, %.0f cleaning up", m[seriesRunning], m[seriesCleanup])
			}
			if s := n.AllServices(); len(s) != 0 {
				return false, fmt.Sprintf("services left on the NICs: %v", s)
			}
			return true, ""
		})
	}
	// idle waits until the agent has listed the kubelet's pods ten more
	// times (a second at its 100 ms poll).
	idle := func(what string) {
		b.Helper()
		want := n.Kubelet.Lists() + 10
		harness.Eventually(b, 10*time.Second, what, func() (bool, string) {
			got := n.Kubelet.Lists()
			return got >= want, itoa(got) + " Lists, want " + itoa(want)
		})
	}
	sample := func(done int) memorySample {
		b.Helper()
		mem, err := agent.Memory()
		if err != nil {
			b.Fatal(err)
		}
		m := scrape()
		return memorySample{pods: done, mem: mem, heapInuse: m["go_memstats_heap_inuse_bytes"], heapGoal: m["go_memstats_next_gc_bytes"],
			goMapped: m["go_memstats_sys_bytes"] - m["go_memstats_heap_released_bytes"], goroutines: m["go_goroutines"], fds: m["process_open_fds"]}
	}

	idle("idle after registration")
	samples := []memorySample{sample(0)}
	every := pods / 10
	start := time.Now()
	var churn time.Duration // pods starting and ending, without the idle waits
	for done := 0; done < pods; {
		batchStart := time.Now()
		size := min(batch, pods-done, every-done%every)
		// At most one batch behind: the agent has cleaned up all but the
		// last.
		released(done-batch, false)
		batchPods := all[done : done+size]
		sandboxes := make([]*harness.Sandbox, size)
		errs := make([]error, size)
		next := make(chan int, size)
		for i := range size {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		for range min(parallel, size) {
			wg.Go(func() {
				for i := range next {
					p := batchPods[i]
					if sandboxes[i], errs[i] = n.NewSandbox(p); errs[i] == nil {
						_, errs[i] = n.Kubelet.Admit(ctx, p)
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				b.Fatalf("pod %d: %v", done+i, err)
			}
		}
		// The pods end: their sandboxes go, then the kubelet frees their
		// devices.
		for i, p := range batchPods {
			if err := sandboxes[i].Stop(); err != nil {
				b.Fatal(err)
			}
			n.Kubelet.RemovePod(p.UID)
		}
		done += size
		if done%every != 0 && done != pods {
			churn += time.Since(batchStart)
			continue
		}
		released(done, true)
		churn += time.Since(batchStart)
		if m := scrape(); int(m[seriesAcquired]) != done || int(m[seriesReleased]) != done {
			b.Fatalf("after %d pods: %.0f VNIs acquired, %.0f released", done, m[seriesAcquired], m[seriesReleased])
		}
		idle(fmt.Sprintf("idle after %d pods", done))
		samples = append(samples, sample(done))
	}
	elapsed := time.Since(start)

	m := scrape()
	first, warm, last := samples[0], samples[2], samples[len(samples)-1]
	var xs, anon, goal []float64
	for _, s := range samples[2:] {
		xs = append(xs, float64(s.pods))
		anon = append(anon, float64(s.mem.Anon))
		goal = append(goal, s.heapGoal)
	}
	anonRise, goalRise := fittedRise(xs, anon), fittedRise(xs, goal)
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
	var tab strings.Builder
	fmt.Fprintf(&tab, "%8s %8s %8s %8s %8s %9s %9s %9s %10s %4s\n", "pods", "RssAnon", "RssFile", "RssShmem", "VmRSS", "goMapped", "heapInuse", "heapGoal", "goroutines", "fds")
	for _, s := range samples {
		fmt.Fprintf(&tab, "%8d %8s %8s %8s %8s %9s %9s %9s %10.0f %4.0f\n", s.pods, mib(float64(s.mem.Anon)), mib(float64(s.mem.File)),
			mib(float64(s.mem.Shmem)), mib(float64(s.mem.RSS)), mib(s.goMapped), mib(s.heapInuse), mib(s.heapGoal), s.goroutines, s.fds)
	}
	b.Logf("agent memory in MiB (goMapped: the Go runtime's memory not returned to the OS), %d NICs, %d pods, %d at a time, %d side by side:\n%s"+
		"from idle to the end: RssAnon %+.1f MiB, RssFile %+.1f MiB; from the %d-pod sample to the end: RssAnon %+.0f KiB (fitted %+.0f KiB), heap goal fitted %+.0f KiB, goroutines %+.0f, open files %+.0f\n"+
		"%v in all, %v of it pods starting and ending (%.1f pods/s); agent CPU %.1f s, PreStart mean %.0f ms",
		nics, pods, batch, parallel, tab.String(),
		float64(last.mem.Anon-first.mem.Anon)/(1<<20), float64(last.mem.File-first.mem.File)/(1<<20), warm.pods,
		float64(last.mem.Anon-warm.mem.Anon)/(1<<10), anonRise/(1<<10), goalRise/(1<<10), last.goroutines-warm.goroutines, last.fds-warm.fds,
		elapsed.Round(time.Second), churn.Round(time.Second), float64(pods)/churn.Seconds(), m["process_cpu_seconds_total"],
		1000*m[`slingshot_agent_prestart_duration_seconds_sum{result="ok"}`]/m[`slingshot_agent_prestart_duration_seconds_count{result="ok"}`])
	b.ReportMetric(float64(first.mem.Anon)/(1<<20), "MiB-anon-idle")
	b.ReportMetric(float64(first.mem.File)/(1<<20), "MiB-file-idle")
	b.ReportMetric(float64(last.mem.Anon)/(1<<20), "MiB-anon-end")
	b.ReportMetric(float64(last.mem.File)/(1<<20), "MiB-file-end")
	b.ReportMetric(anonRise/(1<<10), "KiB-anon-rise")
	b.ReportMetric(float64(pods)/churn.Seconds(), "pods/s")

	var fails []string
	if first.mem.Anon > memoryIdleAnonLimit {
		fails = append(fails, fmt.Sprintf("idle anonymous memory %s MiB, over %s MiB", mib(float64(first.mem.Anon)), mib(memoryIdleAnonLimit)))
	}
	if anonRise > memoryAnonTolerance {
		fails = append(fails, fmt.Sprintf("anonymous memory rose %.0f KiB (least squares) from the %d-pod sample to the end, tolerance %d KiB",
			anonRise/(1<<10), warm.pods, memoryAnonTolerance>>10))
	}
	if last.goroutines > warm.goroutines+memoryGoroutineSlack {
		fails = append(fails, fmt.Sprintf("goroutines %.0f at the %d-pod sample, %.0f at the end", warm.goroutines, warm.pods, last.goroutines))
	}
	if last.fds > warm.fds+memoryFDSlack {
		fails = append(fails, fmt.Sprintf("open files %.0f at the %d-pod sample, %.0f at the end", warm.fds, warm.pods, last.fds))
	}
	if len(fails) > 0 {
		b.Fatalf("agent memory over %d pods:\n%s", pods, strings.Join(fails, "\n"))
	}
}

// fittedRise is the rise from xs[0] to the last of xs of the
// least-squares line through the points (xs[i], ys[i]).
func fittedRise(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx * (xs[len(xs)-1] - xs[0])
}

// quietKlog sends the kubelet code's klog lines (two a pod) to a file in
// the benchmark's directory rather than its output, until it ends.
func quietKlog(b *testing.B) {
	b.Helper()
	f, err := os.Create(filepath.Join(b.TempDir(), "kubelet.log"))
	if err != nil {
		b.Fatal(err)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(f)
	b.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("logtostderr", "true")
		_ = fs.Set("stderrthreshold", "ERROR")
		klog.SetOutput(os.Stderr)
		_ = f.Close()
	})
}

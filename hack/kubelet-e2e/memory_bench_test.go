package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	// grow from the warm-up (the samples at the 2,000th, 3,000th and
	// 4,000th of 10,000 pods) to the end (the last three samples),
	// comparing the highest sample of each. The Go runtime keeps the
	// heap it freed for reuse, returning it to the OS slowly, so a
	// sample reads its footprint from below, and lower still before the
	// footprint has reached its high-water mark: one sample to the next
	// moves by up to 4 MiB, the highest of three by about 1 MiB (runs of
	// make bench-memory: -0.5 to +1.1 MiB). A pod's record left behind
	// (a kilobyte or more) adds 4 to 8 MiB between the windows.
	memoryAnonTolerance = 2 << 20
	// memoryHeapGoalTolerance is the same for the heap goal the last GC
	// set (about twice the live heap), comparing the lowest sample of
	// each window: a GC that ran while pods were running sets a higher
	// goal, never a lower one, so the lowest is the steadiest read.
	memoryHeapGoalTolerance = 2 << 20
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
	pods int // pods started and ended before it
	mem  harness.Memory
	m    map[string]float64 // the agent's /metrics
}

func (s memorySample) heapGoal() float64   { return s.m["go_memstats_next_gc_bytes"] }
func (s memorySample) goroutines() float64 { return s.m["go_goroutines"] }
func (s memorySample) fds() float64        { return s.m["process_open_fds"] }

// goRuntime splits the memory the Go runtime holds from the OS (all of
// go_memstats_sys_bytes but the heap it released) as go_memstats_* do.
func (s memorySample) goRuntime() (heapInuse, heapKept, stacks, gcMeta, profBuckets, other float64) {
	m := s.m
	return m["go_memstats_heap_inuse_bytes"], m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"],
		m["go_memstats_stack_sys_bytes"], m["go_memstats_gc_sys_bytes"], m["go_memstats_buck_hash_sys_bytes"],
		m["go_memstats_mspan_sys_bytes"] + m["go_memstats_mcache_sys_bytes"] + m["go_memstats_other_sys_bytes"]
}

// memstats are the go_memstats_* series goRuntime reads.
var memstats = []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
	"go_memstats_stack_sys_bytes", "go_memstats_gc_sys_bytes", "go_memstats_buck_hash_sys_bytes", "go_memstats_mspan_sys_bytes",
	"go_memstats_mcache_sys_bytes", "go_memstats_other_sys_bytes", "go_memstats_next_gc_bytes"}

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
// fails when the idle anonymous memory is over 16 MiB; when, from the
// warm-up (the samples at the 2,000th to 4,000th of 10,000 pods) to the
// end (the last three), the anonymous memory or the heap goal grows by
// more than 2 MiB (see memoryAnonTolerance); or when goroutines or open
// files grow from the 2,000th pod to the end. Each run is one iteration
// whatever b.N is: run it with -benchtime 1x (make bench-memory).
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
		for _, name := range append([]string{seriesRunning, seriesCleanup, seriesAcquired, seriesReleased, "go_goroutines", "process_open_fds"}, memstats...) {
			if _, ok := m[name]; !ok {
				b.Fatalf("the agent's /metrics has no %s", name)
			}
		}
		return m
	}
	// servicesAtMost waits until the NICs hold at most count services of
	// pods (each pod has one; the agent destroys it as it cleans up),
	// read from the simulated driver's state as another process would:
	// a poll that costs the agent nothing.
	servicesAtMost := func(count int, what string) {
		b.Helper()
		harness.Eventually(b, time.Minute, what, func() (bool, string) {
			total := 0
			for _, s := range n.AllServices() {
				total += len(s)
			}
			return total <= count, fmt.Sprintf("%d services on the NICs, want at most %d", total, count)
		})
	}
	// cleanedUp waits until the agent serves no pod and has released the
	// VNIs of all done pods.
	cleanedUp := func(done int) {
		b.Helper()
		servicesAtMost(0, fmt.Sprintf("the services of %d pods destroyed", done))
		harness.Eventually(b, time.Minute, fmt.Sprintf("%d pods cleaned up", done), func() (bool, string) {
			m := scrape()
			r, c, acq, rel := m[seriesRunning], m[seriesCleanup], int(m[seriesAcquired]), int(m[seriesReleased])
			return r == 0 && c == 0 && acq == done && rel == done,
				fmt.Sprintf("%.0f pods running, %.0f cleaning up, %d VNIs acquired and %d released of %d", r, c, acq, rel, done)
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
		return memorySample{pods: done, mem: mem, m: scrape()}
	}

	idle("idle after registration")
	samples := []memorySample{sample(0)}
	every := pods / 10
	start := time.Now()
	var churn time.Duration // pods starting and ending, without the idle waits
	lastSize := 0           // pods in the last batch
	for done := 0; done < pods; {
		batchStart := time.Now()
		size := min(batch, pods-done, every-done%every)
		// At most one batch behind: the agent has cleaned up all but the
		// last.
		servicesAtMost(lastSize, fmt.Sprintf("the services of the %d pods before the last %d destroyed", done-lastSize, lastSize))
		lastSize = size
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
		cleanedUp(done)
		churn += time.Since(batchStart)
		idle(fmt.Sprintf("idle after %d pods", done))
		samples = append(samples, sample(done))
	}
	elapsed := time.Since(start)

	// Idle after the pods, the agent's Go runtime keeps the heap it
	// needed while they ran: the scavenger returns what is over 110% of
	// the heap that the last GC found in use, and the last GC ran among
	// them. Wait for two more of its own (it forces one every two
	// minutes when nothing else does; the scrapes every 5 s allocate
	// little), then read it again.
	gcs := func() float64 {
		b.Helper()
		v, ok := scrape()["go_gc_duration_seconds_count"]
		if !ok {
			b.Fatal("the agent's /metrics has no go_gc_duration_seconds_count")
		}
		return v
	}
	settleStart := time.Now()
	wantGCs := gcs() + 2
	tick := time.NewTicker(5 * time.Second)
	for got := gcs(); got < wantGCs; got = gcs() {
		if time.Since(settleStart) > 6*time.Minute {
			b.Fatalf("the agent ran %.0f GCs in %v idle, want 2", got-wantGCs+2, time.Since(settleStart).Round(time.Second))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
	}
	tick.Stop()
	idle("idle after two GCs")
	settled := sample(pods)
	settleTook := time.Since(settleStart)

	m := scrape()
	first, warm, last := samples[0], samples[2], samples[len(samples)-1]
	// The windows: the three samples from the warm-up on, and the last
	// three.
	early, late := samples[2:5], samples[len(samples)-3:]
	anonOf := func(s memorySample) float64 { return float64(s.mem.Anon) }
	goalOf := func(s memorySample) float64 { return -s.heapGoal() } // the lowest: the peak of its negation
	anonRise := peak(late, anonOf) - peak(early, anonOf)
	goalRise := peak(early, goalOf) - peak(late, goalOf)
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
	var tab strings.Builder
	fmt.Fprintf(&tab, "%12s | %7s %7s %8s %7s | %9s %8s %6s %6s %7s %5s %8s | %10s %3s\n", "pods", "RssAnon", "RssFile", "RssShmem", "VmRSS",
		"heapInuse", "heapKept", "stacks", "gcMeta", "buckets", "other", "heapGoal", "goroutines", "fds")
	for i, s := range append(samples, settled) {
		inuse, kept, stacks, gc, buckets, other := s.goRuntime()
		label := strconv.Itoa(s.pods)
		if i == len(samples) {
			label += ", 2 GCs"
		}
		fmt.Fprintf(&tab, "%12s | %7s %7s %8s %7s | %9s %8s %6s %6s %7s %5s %8s | %10.0f %3.0f\n", label,
			mib(float64(s.mem.Anon)), mib(float64(s.mem.File)), mib(float64(s.mem.Shmem)), mib(float64(s.mem.RSS)),
			mib(inuse), mib(kept), mib(stacks), mib(gc), mib(buckets), mib(other), mib(s.heapGoal()), s.goroutines(), s.fds())
	}
	b.Logf("agent memory in MiB, %d NICs, %d pods, %d at a time, %d side by side; /proc/<pid>/status, then what the Go runtime holds "+
		"(go_memstats_*: the heap in use, the free heap not yet returned to the OS, goroutine stacks, GC metadata, profiling buckets, the rest) "+
		"and the heap goal the last GC set:\n%s", nics, pods, batch, parallel, tab.String())
	b.Logf("from idle to the end: RssAnon %+.1f MiB, RssFile %+.1f MiB; %+.1f MiB and %+.1f MiB once the agent ran two GCs (%v idle)",
		float64(last.mem.Anon-first.mem.Anon)/(1<<20), float64(last.mem.File-first.mem.File)/(1<<20),
		float64(settled.mem.Anon-first.mem.Anon)/(1<<20), float64(settled.mem.File-first.mem.File)/(1<<20), settleTook.Round(time.Second))
	b.Logf("from the %d-pod sample to the end: RssAnon %+.0f KiB; from the samples at %d-%d pods to the last three: RssAnon %+.0f KiB (the highest of each), heap goal %+.0f KiB (the lowest of each); goroutines %+.0f, open files %+.0f",
		warm.pods, float64(last.mem.Anon-warm.mem.Anon)/(1<<10), early[0].pods, early[2].pods, anonRise/(1<<10), goalRise/(1<<10),
		last.goroutines()-warm.goroutines(), last.fds()-warm.fds())
	b.Logf("%v in all, %v of it pods starting and ending (%.1f pods/s); agent CPU %.1f s, PreStart mean %.0f ms",
		elapsed.Round(time.Second), churn.Round(time.Second), float64(pods)/churn.Seconds(), m["process_cpu_seconds_total"],
		1000*m[`slingshot_agent_prestart_duration_seconds_sum{result="ok"}`]/m[`slingshot_agent_prestart_duration_seconds_count{result="ok"}`])
	b.ReportMetric(float64(first.mem.Anon)/(1<<20), "MiB-anon-idle")
	b.ReportMetric(float64(first.mem.File)/(1<<20), "MiB-file-idle")
	b.ReportMetric(float64(last.mem.Anon)/(1<<20), "MiB-anon-end")
	b.ReportMetric(float64(last.mem.File)/(1<<20), "MiB-file-end")
	b.ReportMetric(float64(settled.mem.Anon)/(1<<20), "MiB-anon-end-2GCs")
	b.ReportMetric(anonRise/(1<<10), "KiB-anon-growth")
	b.ReportMetric(float64(pods)/churn.Seconds(), "pods/s")

	var fails []string
	if first.mem.Anon > memoryIdleAnonLimit {
		fails = append(fails, fmt.Sprintf("idle anonymous memory %s MiB, over %s MiB", mib(float64(first.mem.Anon)), mib(memoryIdleAnonLimit)))
	}
	if anonRise > memoryAnonTolerance {
		fails = append(fails, fmt.Sprintf("anonymous memory grew %.0f KiB from the samples at %d-%d pods to the last three, tolerance %d KiB",
			anonRise/(1<<10), early[0].pods, early[2].pods, memoryAnonTolerance>>10))
	}
	if goalRise > memoryHeapGoalTolerance {
		fails = append(fails, fmt.Sprintf("the heap goal (twice the live heap) grew %.0f KiB from the samples at %d-%d pods to the last three, tolerance %d KiB",
			goalRise/(1<<10), early[0].pods, early[2].pods, memoryHeapGoalTolerance>>10))
	}
	if last.goroutines() > warm.goroutines()+memoryGoroutineSlack {
		fails = append(fails, fmt.Sprintf("goroutines %.0f at the %d-pod sample, %.0f at the end", warm.goroutines(), warm.pods, last.goroutines()))
	}
	if last.fds() > warm.fds()+memoryFDSlack {
		fails = append(fails, fmt.Sprintf("open files %.0f at the %d-pod sample, %.0f at the end", warm.fds(), warm.pods, last.fds()))
	}
	if len(fails) > 0 {
		b.Fatalf("agent memory over %d pods:\n%s", pods, strings.Join(fails, "\n"))
	}
}

// peak is the highest of f over samples.
func peak(samples []memorySample, f func(memorySample) float64) float64 {
	v := f(samples[0])
	for _, s := range samples[1:] {
		v = max(v, f(s))
	}
	return v
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

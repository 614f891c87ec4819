package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// WatchedPod is a pod whose services a ServiceWatch knows: every service
// carrying the pod's VNI is the pod's. Each watched pod has a VNI of its
// own (a Job of its own), which the driver keeps with a service through
// the agent's restarts, unbinds and remakes: unlike a service's ID (a
// remade service may take an ID another pod's had) or its members, it
// names the service's pod at every poll, whatever the agent is doing.
type WatchedPod struct {
	Key, UID string
	VNI      uint16
	// NICs is how many services the pod has when bound, one per NIC.
	NICs int
}

// WatchedPods reads, for pods that run bound, what a ServiceWatch needs:
// each pod's services are those admitting its sandbox's namespace, and
// its VNI the one they all carry and no other pod's does. It fails tb
// when a pod has no service, or no VNI of its own.
func (e *Env) WatchedPods(tb testing.TB, pods []corev1.Pod) []WatchedPod {
	tb.Helper()
	svcs, err := e.DriverServices()
	if err != nil {
		tb.Fatal(err)
	}
	vnis := map[string][]uint16{} // pod key → VNIs all its services carry
	out := make([]WatchedPod, 0, len(pods))
	for _, p := range pods {
		w := WatchedPod{Key: p.Namespace + "/" + p.Name, UID: string(p.UID)}
		sb, ok, err := PodSandbox(w.UID)
		if err != nil || !ok {
			tb.Fatalf("pod %s: no sandbox (%v)", w.Key, err)
		}
		var common []uint16
		for _, s := range svcs {
			if !slices.Contains(s.NetNS, sb.Netns) {
				continue
			}
			if w.NICs == 0 {
				common = slices.Clone(s.VNIs)
			} else {
				common = slices.DeleteFunc(common, func(v uint16) bool { return !slices.Contains(s.VNIs, v) })
			}
			w.NICs++
		}
		if w.NICs == 0 {
			tb.Fatalf("pod %s: no service admits its namespace %d", w.Key, sb.Netns)
		}
		vnis[w.Key] = common
		out = append(out, w)
	}
	for i := range out {
		var own []uint16
		for _, v := range vnis[out[i].Key] {
			shared := false
			for k, other := range vnis {
				shared = shared || (k != out[i].Key && slices.Contains(other, v))
			}
			if !shared {
				own = append(own, v)
			}
		}
		if len(own) != 1 {
			tb.Fatalf("pod %s: VNIs of its own %v (its services carry %v, every pod's: %v); want one", out[i].Key, own, vnis[out[i].Key], vnis)
		}
		out[i].VNI = own[0]
	}
	return out
}

// WatchOptions are what a ServiceWatch checks beyond isolation.
type WatchOptions struct {
	// WorkloadsBound: while a watched pod's workload process runs, every
	// service of the pod admits exactly the workload's namespace and is
	// enabled, and the pod has all its services: no container of the pod
	// runs unbound.
	WorkloadsBound bool
}

// Violation is a poll that saw a service admit a namespace it must not,
// or (WatchOptions.WorkloadsBound) a workload run unbound.
type Violation struct {
	At      time.Time
	Service string // "cxi0/5", "" for a missing service
	Inode   uint32
	What    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s netns %d: %s", v.At.Format("15:04:05.000"), v.Service, v.Inode, v.What)
}

// ServiceWatch polls the simulated driver's services and the node's
// processes at a fixed interval, in a goroutine of its own, and records
// every poll that breaks the isolation of the watched pods:
//
//   - a service of a watched pod (by VNI) admits a namespace in which a
//     process of another pod runs, or the host's namespace;
//   - any other service admits the namespace a process of a watched pod
//     runs in, or the host's.
//
// "A namespace a pod's process runs in" is read from /proc at each poll,
// so it is the pod's current namespace, whatever the agent believes. A
// service that still admits a pod's old namespace while no process of
// any pod runs in it (kept alive by a pin while the agent is down) admits
// no one: that is allowed, since nothing but the agent may change a
// service. Stop ends the goroutine.
type ServiceWatch struct {
	e      *Env
	pods   []WatchedPod
	opts   WatchOptions
	host   uint32
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	violations []Violation
	seen       map[string]bool // violations recorded, by service, inode and what
	report     WatchReport
	last       time.Time
}

// WatchReport sums up a ServiceWatch.
type WatchReport struct {
	// Polls is the number of polls; MaxGap the longest time between the
	// starts of two, MaxPoll the longest poll.
	Polls           int
	MaxGap, MaxPoll time.Duration
	// Violations are the first of each kind (service, namespace and what),
	// in order, and Count how many polls saw one at all.
	Violations []Violation
	Count      int
	// Errors are reads that failed (a poll that saw nothing).
	Errors []string
}

// maxViolations bounds what a watch keeps of its violations.
const maxViolations = 100

// WatchServices starts a ServiceWatch of pods, polling every interval
// until ctx ends or Stop.
func (e *Env) WatchServices(ctx context.Context, interval time.Duration, pods []WatchedPod, opts WatchOptions) (*ServiceWatch, error) {
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil, err
	}
	hostIno, err := netns.ParseNetnsLink(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &ServiceWatch{e: e, pods: pods, opts: opts, host: hostIno, cancel: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	go w.run(ctx, interval)
	return w, nil
}

// Stop ends the watch, waits for its goroutine and returns its report.
// It may be called more than once.
func (w *ServiceWatch) Stop() WatchReport {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.report
	r.Violations = slices.Clone(w.violations)
	r.Errors = slices.Clone(r.Errors)
	return r
}

func (w *ServiceWatch) run(ctx context.Context, interval time.Duration) {
	defer close(w.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// nodeNetns is what one poll read of the node's processes: for each
// network namespace a process runs in, the UIDs of the pods whose
// processes run there; and for each watched pod, the namespaces of its
// workload processes.
type nodeNetns struct {
	pods      map[uint32][]string
	workloads map[string][]uint32
}

// podCgroup finds a pod's UID in a process's cgroups (the kubelet's
// cgroupfs layout: .../pod<uid>/<container>).
var podCgroup = regexp.MustCompile(`/pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/`)

// readNodeNetns reads every process of the node. A process that exits
// during the read is skipped.
func readNodeNetns() (nodeNetns, error) {
	n := nodeNetns{pods: map[uint32][]string{}, workloads: map[string][]uint32{}}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return n, err
	}
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", ent.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil {
			continue
		}
		m := podCgroup.FindSubmatch(cg)
		if m == nil {
			continue
		}
		link, err := os.Readlink(filepath.Join(dir, "ns", "net"))
		if err != nil {
			continue
		}
		ino, err := netns.ParseNetnsLink(link)
		if err != nil {
			continue
		}
		uid := string(m[1])
		if !slices.Contains(n.pods[ino], uid) {
			n.pods[ino] = append(n.pods[ino], uid)
		}
		if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil && strings.HasSuffix(exe, "/workload") {
			if !slices.Contains(n.workloads[uid], ino) {
				n.workloads[uid] = append(n.workloads[uid], ino)
			}
		}
	}
	return n, nil
}

func (w *ServiceWatch) poll() {
	start := time.Now()
	svcs, err := w.e.DriverServices()
	var procs nodeNetns
	if err == nil {
		procs, err = readNodeNetns()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.report.Polls++
	if !w.last.IsZero() {
		w.report.MaxGap = max(w.report.MaxGap, start.Sub(w.last))
	}
	w.last = start
	defer func() { w.report.MaxPoll = max(w.report.MaxPoll, time.Since(start)) }()
	if err != nil {
		w.report.Errors = append(w.report.Errors, fmt.Sprintf("%s: %v", start.Format("15:04:05.000"), err))
		return
	}
	found := w.check(start, svcs, procs)
	if len(found) > 0 {
		w.report.Count++
	}
	for _, v := range found {
		k := fmt.Sprintf("%s|%d|%s", v.Service, v.Inode, v.What)
		if w.seen[k] || len(w.violations) >= maxViolations {
			continue
		}
		w.seen[k] = true
		w.violations = append(w.violations, v)
	}
}

// check is one poll's verdict on the services svcs and the node's
// processes procs.
func (w *ServiceWatch) check(at time.Time, svcs []simstate.Service, procs nodeNetns) []Violation {
	var out []Violation
	owner := func(s simstate.Service) *WatchedPod {
		for i := range w.pods {
			if slices.Contains(s.VNIs, w.pods[i].VNI) {
				return &w.pods[i]
			}
		}
		return nil
	}
	watched := func(uid string) string {
		for _, p := range w.pods {
			if p.UID == uid {
				return p.Key
			}
		}
		return ""
	}
	for _, s := range svcs {
		o := owner(s)
		name := fmt.Sprintf("%s/%d", s.NIC, s.ID)
		for _, ino := range s.NetNS {
			var others []string
			if ino == w.host {
				others = append(others, "the host")
			}
			for _, uid := range procs.pods[ino] {
				switch key := watched(uid); {
				case o != nil && uid == o.UID:
				case o != nil && key != "":
					others = append(others, "pod "+key)
				case o != nil:
					others = append(others, "pod uid "+uid)
				case key != "":
					others = append(others, "pod "+key)
				}
			}
			if len(others) == 0 {
				continue
			}
			whose := "a service of no watched pod (VNIs " + fmt.Sprint(s.VNIs) + ")"
			if o != nil {
				whose = "pod " + o.Key + "'s service"
			}
			out = append(out, Violation{At: at, Service: name, Inode: ino,
				What: fmt.Sprintf("%s (enabled=%v, netns %v) admits the namespace of %s", whose, s.Enabled, s.NetNS, strings.Join(others, ", "))})
		}
	}
	if w.opts.WorkloadsBound {
		for _, p := range w.pods {
			var own []simstate.Service
			for _, s := range svcs {
				if o := owner(s); o != nil && o.UID == p.UID {
					own = append(own, s)
				}
			}
			for _, ino := range procs.workloads[p.UID] {
				if len(own) != p.NICs {
					out = append(out, Violation{At: at, Inode: ino, What: fmt.Sprintf("pod %s's workload runs with %d services of its VNI %d, want %d: %v", p.Key, len(own), p.VNI, p.NICs, own)})
				}
				for _, s := range own {
					if !s.Enabled || !s.OnlyNetns(ino) {
						out = append(out, Violation{At: at, Service: fmt.Sprintf("%s/%d", s.NIC, s.ID), Inode: ino,
							What: fmt.Sprintf("pod %s's workload runs in namespace %d while its service is enabled=%v with netns %v", p.Key, ino, s.Enabled, s.NetNS)})
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out
}

// Check fails tb with each violation r holds and each failed read, and
// logs how the polls went.
func (r WatchReport) Check(tb testing.TB, interval time.Duration) {
	tb.Helper()
	tb.Logf("service watch: %d polls every %s, longest gap %s, longest poll %s; %d polls saw a violation",
		r.Polls, interval, r.MaxGap.Round(time.Millisecond), r.MaxPoll.Round(time.Millisecond), r.Count)
	for _, v := range r.Violations {
		tb.Errorf("service watch: %s", v)
	}
	for _, e := range r.Errors {
		tb.Errorf("service watch: a poll failed: %s", e)
	}
}

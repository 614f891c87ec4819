package gang

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

var (
	gangNodes   = flag.Int("gang.nodes", 512, "simulated nodes")
	gangPods    = flag.Int("gang.pods", 4096, "pods of the one big job")
	gangJobs    = flag.Int("gang.jobs", 64, "jobs of the second scenario")
	gangJobPods = flag.Int("gang.job-pods", 64, "pods of each job of the second scenario")
	gangDriver  = flag.Bool("gang.driver", true, "bind a CXI service per pod on the simulated driver after the lease")
	gangLoose   = flag.Bool("gang.loose-calls", false, "only log, not fail, when a node calls the controller more than once for one job")
	gangTries   = flag.Int("gang.attempts", 0, "attempts of each controller call (0: the agent's default, 6 over about 3 s of backoff); more stand for the kubelet retrying a failed container start")
)

// simNode is one simulated node: the agent's lease path (its controller
// client, heartbeating and keeping its pod VNI pool, under engine.Leases)
// and one simulated NIC.
type simNode struct {
	name   string
	client *controllerclient.Client
	leases *engine.Leases
	reg    *prometheus.Registry // the client's slingshot_agent_* metrics
	dev    *sim.Device
	nic    *cxi.Client

	// inUse counts the node's pods by the VNI they run on: what the
	// agent's checkpoint records, reported on every heartbeat (see
	// controllerclient.Options.InUseVNIs).
	mu    sync.Mutex
	inUse map[uint16]int
}

// use counts one more (d=1) or one fewer (d=-1) pod on vni.
func (n *simNode) use(vni uint16, d int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inUse[vni] += d; n.inUse[vni] <= 0 {
		delete(n.inUse, vni)
	}
}

func (n *simNode) inUseVNIs(context.Context) ([]uint16, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]uint16, 0, len(n.inUse))
	for v := range n.inUse {
		out = append(out, v)
	}
	return out, nil
}

// agentCalls returns how many calls of method the node's client has made
// (each counted once, whatever its retries), from its own metric.
func (n *simNode) agentCalls(method string) (float64, error) {
	mfs, err := n.reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather %s: %w", n.name, err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "slingshot_agent_controller_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum, nil
}

// cluster is what every scenario shares: the controller and the nodes.
type cluster struct {
	kube     kubernetes.Interface
	ctl      *controllerProc
	storeNS  string
	nodes    []*simNode
	answered map[string]uint16 // lease key "job/NS/UID" -> the VNI its pods got
	// failedOn names, by lease key, the nodes where a pod's acquire
	// failed: the controller may have recorded the node's hold before the
	// answer was lost, and only the hold grace (--hold-grace) drops it.
	failedOn map[string]map[string]bool
	iter     int
}

// podResult is one pod's path from admission.
type podResult struct {
	node          int
	job           int
	lease         controllerclient.Lease
	svc           uint32
	leased, bound time.Duration
	err           error
}

// counters are the figures read before and after a phase.
type counters struct {
	storeWrites, otherWrites, resolverReads float64
	ctlAcquires, ctlReleases, ctlRenews     float64
	cpu                                     map[string]time.Duration
}

// BenchmarkGang: the slingshot-controller binary (--store kube
// --leader-elect, one replica) on a real kube-apiserver and etcd, and
// -gang.nodes simulated nodes, each with the agent's controller client
// (heartbeats every 10 s, a pod VNI pool) under engine.Leases and a
// simulated NIC. Two scenarios, each admitting all its pods at once,
// -gang.pods/-gang.nodes pods per node, a job's pods on consecutive
// nodes: one job of -gang.pods pods ("one-job"), then -gang.jobs jobs of
// -gang.job-pods pods ("many-jobs"). Each pod, on its node, leases its
// job's VNI through engine.Leases.Acquire with its namespace/name as
// holder, then (with -gang.driver) creates its CXI service on the node's
// NIC: the VNI, its network namespace as member. The pods and their
// Jobs (batch/v1, the owner the controller resolves) are created in the
// API server before the timer starts, as the Job controller and the
// scheduler would have; admission is the instant every pod is handed to
// its node. Then every pod's hold is released (engine.Leases.Release,
// the node's hold with its last local pod) and its service destroyed.
//
// It checks that every pod of a job got one VNI, that no two jobs got the
// same VNI, and, after all runs, that the store (loaded as a new leader
// would, once the controller is stopped) holds each job's lease with the
// VNI its pods got and no node holding it. It prints per scenario, one
// line each: latency from admission to VNI leased and to service bound
// (p50, p99, max); the controller calls per node per job, from the nodes'
// client metrics and the controller's; API writes per node per job; the
// CPU time of the controller, kube-apiserver, etcd and the simulated nodes.
//
// Run it once per scenario: -benchtime 1x (make gang-bench).
func BenchmarkGang(b *testing.B) {
	ctx := b.Context()
	dir := b.TempDir()
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		b.Fatal(err)
	}
	c := &cluster{kube: cs, storeNS: "gang-store", answered: map[string]uint16{}, failedOn: map[string]map[string]bool{}}
	ensureNamespace(b, cs, c.storeNS)
	nodes := *gangNodes
	if nodes < 1 || *gangPods < nodes || *gangJobs**gangJobPods < nodes {
		b.Fatalf("each scenario needs at least one pod per node: -gang.nodes=%d, -gang.pods=%d, %d jobs of %d pods",
			nodes, *gangPods, *gangJobs, *gangJobPods)
	}
	// The Node objects, so that the controller's sweep never takes these
	// nodes for gone ones.
	for n := range nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(n)}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatalf("create node: %v", err)
		}
	}

	// Pod VNIs: one slice of 16 per node, from the top of the range; job
	// VNIs from below it. A node's pool refills below 8 free VNIs.
	podLow := 65536 - 16*nodes
	if podLow < 1024+2*(*gangJobs+1)*max(1, b.N) {
		b.Fatalf("-gang.nodes=%d leaves too few job VNIs", nodes)
	}
	bin := buildController(b, dir)
	ctl, stop := startController(b, bin, filepath.Join(dir, "controller.log"),
		"--store", "kube", "--leader-elect", "--store-namespace", c.storeNS, "--identity", "gang",
		"--kubeconfig", writeKubeconfig(b, dir),
		// Kubernetes' own election timings rather than the controller's
		// 2 s lease: on a shared 2-core machine creating thousands of pods,
		// a renewal missed its 1.5 s deadline and the leader stepped down
		// mid-run. The election is not what this measures.
		"--leader-elect-lease-duration", "15s", "--leader-elect-renew-deadline", "10s", "--leader-elect-retry-period", "2s",
		// Every simulated agent connects from 127.0.0.1, as agents behind
		// a NodePort would; the README says to lift the per-host bound then.
		"--grpc-max-connections-per-host", "0",
		"--pod-vni-range", fmt.Sprintf("%d-65535", podLow), "--pod-vni-slice-size", "16")
	defer stop()
	c.ctl = ctl
	waitReady(b, ctl)

	stateDir := os.Getenv("GANG_STATE_DIR")
	if stateDir == "" {
		// The simulated driver rewrites its state file at each command:
		// on tmpfs that costs what the real driver's ioctl would, roughly,
		// rather than a disk's.
		stateDir = dir
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			if stateDir, err = os.MkdirTemp("/dev/shm", "gang"); err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(stateDir)
		}
	}

	// The nodes: their clients run until the benchmark ends.
	nctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		for _, n := range c.nodes {
			n.client.Close()
			n.dev.Close()
		}
	}()
	for i := range nodes {
		n := &simNode{name: nodeName(i), reg: prometheus.NewRegistry(), inUse: map[uint16]int{}}
		opts := controllerclient.Options{Node: n.name, Registerer: n.reg, InUseVNIs: n.inUseVNIs}
		if *gangTries > 0 {
			// The agent's policy (controllerclient's default), longer.
			opts.Retry = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Factor: 2, Jitter: 0.2, Attempts: *gangTries}
		}
		n.client, err = controllerclient.Dial(ctl.grpc, opts)
		if err != nil {
			b.Fatal(err)
		}
		n.leases = engine.NewLeases(n.client)
		if n.dev, err = sim.Open(filepath.Join(stateDir, n.name), "cxi0", sim.Options{NoSync: true}); err != nil {
			n.client.Close()
			b.Fatal(err)
		}
		n.nic = cxi.NewClient(uapi.NewDevice(n.dev))
		c.nodes = append(c.nodes, n)
		wg.Go(func() { _ = n.client.Run(nctx) })
	}
	// Every node's pool is filled before the first admission, as on a
	// cluster that has run a while: PodVNI waits for Run's refill.
	start := time.Now()
	if err := forAll(ctx, 64, nodes, func(ctx context.Context, i int) error {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer wcancel()
		v, err := c.nodes[i].client.PodVNI(wctx)
		if err != nil {
			return fmt.Errorf("%s: pod vni pool: %w", c.nodes[i].name, err)
		}
		c.nodes[i].client.ReturnPodVNI(v)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("gang: %d nodes connected, pools filled in %v", nodes, time.Since(start).Round(time.Millisecond))

	b.Run("one-job", func(b *testing.B) { c.bench(b, []int{*gangPods}) })
	b.Run("many-jobs", func(b *testing.B) { c.bench(b, slices.Repeat([]int{*gangJobPods}, *gangJobs)) })

	// What the store holds, read as a new leader would, once the
	// controller has stopped (a Load fences out the writer).
	cancel()
	wg.Wait()
	stop()
	st, err := kube.New(srv.Config, kube.Options{Namespace: c.storeNS, Identity: "check"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	state, err := st.Load(ctx)
	if err != nil {
		b.Fatal(err)
	}
	byVNI := map[uint16]string{}
	stored := map[string]uint16{}
	for _, l := range state.Leases {
		if other, ok := byVNI[l.VNI]; ok {
			b.Errorf("VNI %d leased to %s and %s", l.VNI, other, l.Key)
		}
		byVNI[l.VNI] = l.Key
		stored[l.Key] = l.VNI
		if _, ours := c.answered[l.Key]; !ours {
			continue
		}
		for _, node := range l.Nodes {
			if !c.failedOn[l.Key][node] {
				b.Errorf("lease %s still held by %s after every pod there released it", l.Key, node)
			}
		}
	}
	for key, vni := range c.answered {
		if got, ok := stored[key]; !ok || got != vni {
			b.Errorf("job %s: its pods got VNI %d, the store holds %d (present %v)", key, vni, got, ok)
		}
	}
}

// bench runs one scenario b.N times: jobs lists each job's pod count.
func (c *cluster) bench(b *testing.B, jobs []int) {
	for range b.N {
		c.iter++
		c.once(b, jobs)
	}
}

// placement returns each pod's job and node: the pods of all jobs in
// order, spread evenly, so that a job's pods fill consecutive nodes.
func placement(jobs []int, nodes int) (job, node []int) {
	total := 0
	for _, n := range jobs {
		total += n
	}
	for j, n := range jobs {
		for range n {
			node = append(node, len(job)*nodes/total)
			job = append(job, j)
		}
	}
	return job, node
}

func (c *cluster) once(b *testing.B, jobs []int) {
	b.StopTimer()
	ctx := b.Context()
	ns := ensureNamespace(b, c.kube, fmt.Sprintf("gang-%d", c.iter))
	jobOf, nodeOf := placement(jobs, len(c.nodes))
	jobUIDs, pods := c.createPods(b, ns, jobs, jobOf, nodeOf)
	pairs := map[[2]int]bool{} // node-job pairs
	for i := range pods {
		pairs[[2]int{nodeOf[i], jobOf[i]}] = true
	}
	agentBefore := c.agentCalls(b, "AcquireJobVNI")
	before := c.read(b)

	// Admission: every pod handed to its node at once.
	res := make([]podResult, len(pods))
	gate := make(chan struct{})
	var admitted time.Time // written before the gate opens, read after
	var wg sync.WaitGroup
	for i, p := range pods {
		res[i].node, res[i].job = nodeOf[i], jobOf[i]
		wg.Go(func() {
			<-gate
			c.admit(ctx, admitted, &res[i], p)
		})
	}
	b.StartTimer()
	admitted = time.Now()
	close(gate)
	wg.Wait()
	all := time.Since(admitted)
	b.StopTimer()
	after := c.read(b)
	agentAfter := c.agentCalls(b, "AcquireJobVNI")

	// Correctness: one VNI per job, no VNI on two jobs, none on an
	// earlier scenario's job (they are all still live).
	vniOf := make([]uint16, len(jobs))
	var failed int
	var firstErr error
	for i, r := range res {
		if r.err != nil {
			if failed++; failed == 1 {
				firstErr = fmt.Errorf("pod %s: %w", pods[i].Name, r.err)
			}
			key := "job/" + ns + "/" + jobUIDs[r.job]
			if c.failedOn[key] == nil {
				c.failedOn[key] = map[string]bool{}
			}
			c.failedOn[key][c.nodes[r.node].name] = true
			continue
		}
		switch v := vniOf[r.job]; {
		case r.lease.VNI == 0:
			b.Errorf("pod %s: VNI 0", pods[i].Name)
		case v == 0:
			vniOf[r.job] = r.lease.VNI
		case v != r.lease.VNI:
			b.Errorf("job %d: pod %s got VNI %d, another pod %d", r.job, pods[i].Name, r.lease.VNI, v)
		}
	}
	for j, v := range vniOf {
		if v == 0 {
			continue // every pod of the job failed
		}
		key := "job/" + ns + "/" + jobUIDs[j]
		for k, w := range c.answered {
			if w == v {
				b.Errorf("VNI %d given to job %s and to job %s", v, key, k)
			}
		}
		c.answered[key] = v
	}

	// Releases, as each pod exits: the service, then the pod's hold.
	relBefore := c.read(b)
	relAgentBefore := c.agentCalls(b, "ReleaseJobVNI")
	if err := forAll(ctx, len(pods), len(pods), func(ctx context.Context, i int) error {
		if res[i].err != nil {
			return nil // never leased
		}
		n := c.nodes[res[i].node]
		if *gangDriver {
			if err := n.nic.Destroy(ctx, res[i].svc); err != nil {
				return fmt.Errorf("pod %s: destroy service %d: %w", pods[i].Name, res[i].svc, err)
			}
		}
		if err := n.leases.Release(ctx, holder(pods[i]), res[i].lease); err != nil {
			return fmt.Errorf("pod %s: %w", pods[i].Name, err)
		}
		n.use(res[i].lease.VNI, -1)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	relAfter := c.read(b)
	relAgentAfter := c.agentCalls(b, "ReleaseJobVNI")
	for i, n := range c.nodes {
		for j, v := range vniOf {
			if pairs[[2]int{i, j}] && n.leases.Holders("job/"+ns+"/"+jobUIDs[j]) != 0 {
				b.Errorf("%s still counts holders of VNI %d after every pod released it", n.name, v)
			}
		}
	}

	// Figures.
	perNodeJob := float64(len(pairs))
	jobsOn := map[int]int{}
	for p := range pairs {
		jobsOn[p[0]]++
	}
	var mean, worst float64
	over := 0
	for i := range c.nodes {
		calls := agentAfter[i] - agentBefore[i]
		per := calls / float64(max(1, jobsOn[i]))
		mean += calls
		worst = max(worst, per)
		if per > 1 {
			over++
		}
	}
	mean /= perNodeJob
	var leased, bound []time.Duration
	for _, r := range res {
		if r.err != nil {
			continue
		}
		leased = append(leased, r.leased)
		bound = append(bound, r.bound)
	}
	name := fmt.Sprintf("%d pods, %d jobs, %d nodes", len(pods), len(jobs), len(c.nodes))
	b.Logf("gang %s: admission to VNI leased p50 %v p99 %v max %v; to service bound p50 %v p99 %v max %v (driver %v); all done in %v; %d pods failed (attempts %d)",
		name, pct(leased, 50), pct(leased, 99), pct(leased, 100), pct(bound, 50), pct(bound, 99), pct(bound, 100), *gangDriver, all.Round(time.Millisecond),
		failed, *gangTries)
	b.Logf("gang %s: controller calls per node per job: AcquireJobVNI %.2f (max %.0f; %d of %d nodes over 1), ReleaseJobVNI %.2f; the controller received %.2f acquires, %.2f releases per node per job, %.0f heartbeats",
		name, mean, worst, over, len(c.nodes), (sum(relAgentAfter)-sum(relAgentBefore))/perNodeJob,
		(after.ctlAcquires-before.ctlAcquires)/perNodeJob, (relAfter.ctlReleases-relBefore.ctlReleases)/perNodeJob, after.ctlRenews-before.ctlRenews)
	b.Logf("gang %s: API writes per node per job: acquire %.2f (%.0f store, %.0f other), release %.2f (%.0f store); resolver reads %.2f per pod",
		name, (after.storeWrites-before.storeWrites)/perNodeJob, after.storeWrites-before.storeWrites, after.otherWrites-before.otherWrites,
		(relAfter.storeWrites-relBefore.storeWrites)/perNodeJob, relAfter.storeWrites-relBefore.storeWrites,
		(after.resolverReads-before.resolverReads)/float64(len(pods)))
	cpu := func(k string) time.Duration { return (after.cpu[k] - before.cpu[k]).Round(10 * time.Millisecond) }
	b.Logf("gang %s: CPU over %v: controller %v (%.0f µs per pod), kube-apiserver %v, etcd %v, nodes and bench %v",
		name, all.Round(time.Millisecond), cpu("controller"), float64(cpu("controller").Microseconds())/float64(len(pods)),
		cpu("kube-apiserver"), cpu("etcd"), cpu("self"))
	b.ReportMetric(float64(pct(leased, 99).Microseconds())/1000, "p99-leased-ms")
	b.ReportMetric(float64(pct(bound, 99).Microseconds())/1000, "p99-bound-ms")
	b.ReportMetric(mean, "calls/node-job")
	b.ReportMetric(float64(cpu("controller").Milliseconds()), "controller-cpu-ms")
	if failed > 0 {
		b.Errorf("%d of %d pods got no VNI within the client's retry budget; the first: %v", failed, len(pods), firstErr)
	}
	if worst > 1 {
		msg := fmt.Sprintf("a node called AcquireJobVNI %.0f times for one job (want at most once: engine.Leases.AcquireShared)", worst)
		if *gangLoose {
			b.Log("gang: requirement not met: " + msg)
		} else {
			b.Error(msg)
		}
	}
}

// admit runs one pod's path on its node: the lease, then the service.
func (c *cluster) admit(ctx context.Context, t0 time.Time, r *podResult, p *corev1.Pod) {
	n := c.nodes[r.node]
	// As the agent: the job named by the sandbox's labels (the pod's).
	share := engine.ShareKey(p.Namespace, p.Labels, p.Annotations)
	r.lease, r.err = n.leases.AcquireShared(ctx, holder(p), controllerclient.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}, share)
	r.leased = time.Since(t0)
	if r.err != nil {
		r.err = fmt.Errorf("lease on %s: %w", n.name, r.err)
		return
	}
	n.use(r.lease.VNI, 1)
	r.bound = r.leased
	if !*gangDriver {
		return
	}
	// The pod's network namespace as the only member: an inode number
	// of its own, as the agent reads it from the held namespace.
	svc, err := n.nic.Create(ctx, cxi.ServiceSpec{VNIs: []uint16{r.lease.VNI},
		Members: []cxi.Member{{Type: cxi.MemberNetNS, ID: netnsInode(p)}}, TCs: cxi.TCBestEffort})
	r.bound = time.Since(t0)
	if err != nil {
		r.err = fmt.Errorf("service on %s: %w", n.name, err)
		return
	}
	r.svc = svc.ID
}

// netnsInode makes a distinct, plausible namespace inode for pod p.
func netnsInode(p *corev1.Pod) uint32 {
	var h uint32 = 2166136261
	for _, c := range []byte(p.UID) {
		h = (h ^ uint32(c)) * 16777619
	}
	return 0xf0000000 | h&0x0fffffff
}

func holder(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// createPods creates the jobs (batch/v1 Job, which the controller's
// resolver follows) and their pods, bound to their nodes, 32 requests at
// a time. It returns the jobs' UIDs and the pods in order.
func (c *cluster) createPods(b *testing.B, ns string, jobs, jobOf, nodeOf []int) ([]string, []*corev1.Pod) {
	ctx := b.Context()
	uids := make([]string, len(jobs))
	if err := forAll(ctx, 32, len(jobs), func(ctx context.Context, j int) error {
		job, err := c.kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", j)},
			Spec: batchv1.JobSpec{Parallelism: ptr(int32(jobs[j])), Completions: ptr(int32(jobs[j])), Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "rank", Image: "mpi"}}}}}},
			metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create job %d: %w", j, err)
		}
		uids[j] = string(job.UID)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, len(jobOf))
	no := false
	if err := forAll(ctx, 32, len(jobOf), func(ctx context.Context, i int) error {
		j := jobOf[i]
		p, err := c.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d-%d", j, i),
			// The Job controller's label, which the runtime reports with
			// the pod's sandbox and the agent shares its job's lease by.
			Labels:          map[string]string{"batch.kubernetes.io/controller-uid": uids[j]},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: fmt.Sprintf("job-%d", j), UID: types.UID(uids[j]), Controller: ptr(true)}}},
			Spec: corev1.PodSpec{NodeName: nodeName(nodeOf[i]), AutomountServiceAccountToken: &no, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "rank", Image: "mpi"}}}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod %d: %w", i, err)
		}
		pods[i] = p
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return uids, pods
}

// agentCalls reads each node's count of calls of method.
func (c *cluster) agentCalls(b *testing.B, method string) []float64 {
	out := make([]float64, len(c.nodes))
	for i, n := range c.nodes {
		v, err := n.agentCalls(method)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// read takes the counters: the API server's requests by group and verb,
// the controller's calls received, and the processes' CPU time.
func (c *cluster) read(b *testing.B) counters {
	ctx := b.Context()
	var k counters
	raw, err := c.kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("API server metrics: %v", err)
	}
	api, err := parseMetrics(bytes.NewReader(raw), "apiserver_request_total")
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range api {
		switch verb := s.labels["verb"]; {
		case verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "DELETE" || verb == "APPLY":
			if s.labels["group"] == "slingshot.hpe.com" {
				k.storeWrites += s.value
			} else {
				k.otherWrites += s.value
			}
		case verb == "GET" && (s.labels["resource"] == "pods" || s.labels["resource"] == "jobs"):
			k.resolverReads += s.value
		}
	}
	ctl, err := scrapeController(ctx, c.ctl.metrics, "slingshot_controller_grpc_request_duration_seconds_count")
	if err != nil {
		b.Fatalf("%v; the controller's log ends:\n%s", err, c.ctl.logTail(15))
	}
	for _, s := range ctl {
		switch m := s.labels["method"]; {
		case strings.HasSuffix(m, "AcquireJobVNI"):
			k.ctlAcquires += s.value
		case strings.HasSuffix(m, "ReleaseJobVNI"):
			k.ctlReleases += s.value
		case strings.HasSuffix(m, "RenewSlices"):
			k.ctlRenews += s.value
		}
	}
	k.cpu = map[string]time.Duration{}
	children, err := childPIDs()
	if err != nil {
		b.Fatal(err)
	}
	pids := map[string]int{"controller": c.ctl.cmd.Process.Pid, "self": os.Getpid(),
		"kube-apiserver": children["kube-apiserver"], "etcd": children["etcd"]}
	for name, pid := range pids {
		if pid == 0 {
			continue // not found: the figure reads 0
		}
		if k.cpu[name], err = procCPU(pid); err != nil {
			b.Fatalf("CPU of %s: %v", name, err)
		}
	}
	return k
}

// waitReady polls the controller's /readyz until it has loaded and leads:
// its gRPC port serves before that.
func waitReady(b *testing.B, ctl *controllerProc) {
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, "http://"+ctl.metrics+"/readyz", nil)
		if err != nil {
			b.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-deadline.C:
			b.Fatal("controller not ready within 2 min")
		case <-ctl.done:
			b.Fatalf("controller exited: %v; its log ends:\n%s", ctl.err, ctl.logTail(15))
		case <-tick.C:
		}
	}
}

// forAll runs f(ctx, i) for i in [0, n), at most limit at a time, and
// returns the first error; the others are cancelled by it.
func forAll(ctx context.Context, limit, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { first = err; cancel(err) })
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return first
}

func ensureNamespace(b *testing.B, cs kubernetes.Interface, ns string) string {
	_, err := cs.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("create namespace %s: %v", ns, err)
	}
	// The API server's admission wants the default ServiceAccount, which
	// no controller-manager makes here.
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(b.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("create service account in %s: %v", ns, err)
	}
	return ns
}

func nodeName(n int) string { return fmt.Sprintf("gang-node-%04d", n) }

// pct returns the p-th percentile of d (100: the maximum); d is sorted.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(float64(len(d))*p/100+0.5) - 1
	return d[min(max(i, 0), len(d)-1)].Round(time.Millisecond)
}

func ptr[T any](v T) *T { return &v }

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

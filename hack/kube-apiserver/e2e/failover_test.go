package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// replica is one slingshot-controller process.
type replica struct {
	id     string
	cmd    *exec.Cmd
	client apiv1.ControllerClient
	conn   *grpc.ClientConn
	exited chan error
	// http receives the address of each HTTP server the replica serves
	// (its "serving http" log lines: hooks, then metrics).
	http chan string
	// loads receives the replica's "store loaded" log lines.
	loads chan string
}

// startReplica runs slingshot-controller --store kube --leader-elect as
// replica id, with its JSON log appended to logs and extra flags after
// the others.
func startReplica(t *testing.T, ns, id, kubeconfig string, logs io.Writer, extra ...string) *replica {
	t.Helper()
	args := append([]string{"--store", "kube", "--leader-elect", "--store-namespace", ns, "--identity", id}, extra...)
	return startController(t, id, kubeconfig, logs, args...)
}

// startController runs slingshot-controller as replica id with the
// kubeconfig, no agent authentication, a gRPC port of its own and no HTTP
// servers, its JSON log appended to logs, and args after those flags.
func startController(t *testing.T, id, kubeconfig string, logs io.Writer, args ...string) *replica {
	t.Helper()
	args = append([]string{"--kubeconfig", kubeconfig, "--auth", "none", "--grpc-addr", "127.0.0.1:0", "--hooks-addr=", "--metrics-addr=",
		"--log-format", "json"}, args...)
	cmd := exec.Command(controllerBinary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, cmd: cmd, exited: make(chan error, 1), http: make(chan string, 2), loads: make(chan string, 16)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintf(logs, "%s %s\n", id, sc.Bytes())
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch line.Msg {
			case "serving grpc":
				addr <- line.Addr
			case "serving http":
				select {
				case r.http <- line.Addr:
				default:
				}
			case "store loaded":
				select {
				case r.loads <- string(sc.Bytes()):
				default:
				}
			}
		}
		r.exited <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		r.conn, r.client = conn, apiv1.NewControllerClient(conn)
	case err := <-r.exited:
		t.Fatalf("replica %s exited: %v", id, err)
	case <-time.After(time.Minute):
		t.Fatalf("replica %s did not listen within a minute", id)
	}
	t.Cleanup(func() {
		r.conn.Close()
		_ = cmd.Process.Kill()
		r.exited <- <-r.exited
	})
	return r
}

// createPods creates n pods (pending forever: no scheduler runs) for the
// controller's resolver to find, and returns their names and UIDs.
func createPods(t *testing.T, ns string, n int) ([]string, []string) {
	t.Helper()
	cs := kubeClient(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names, uids := make([]string, n), make([]string, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var failed atomic.Value
	no := false
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i)},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
				metav1.CreateOptions{})
			if err != nil {
				failed.Store(err)
				return
			}
			names[i], uids[i] = p.Name, string(p.UID)
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("create pods: %v", err)
	}
	return names, uids
}

// TestFailoverLosesAndDuplicatesNoLease runs three slingshot-controller
// replicas (--store kube --leader-elect) under an acquire storm of 32
// clients (every acquire for a new pod, so a new lease; a call that fails
// is retried for the same pod), SIGKILLs the leader mid-storm, then stops
// the next leader with SIGTERM.
// Every acknowledged lease must be in the store afterwards with the VNI
// its client was told, and no VNI may be leased twice.
//
// With -failover.scale the store first holds -scale.nodes nodes' slices
// and -scale.leases leases (seedStore), every one of which must survive
// too, and the replicas follow it as warm standbys; it prints the
// failover times and the new leaders' loads in one line.
func TestFailoverLosesAndDuplicatesNoLease(t *testing.T) {
	ns := newNamespace(t, "failover")
	podNS := newNamespace(t, "storm")
	var seeded []string
	if *failoverScale {
		start := time.Now()
		seedStore(t, ns, *scaleNodes, *scaleLeases)
		t.Logf("seeded %d nodes' slices and %d leases in %v", *scaleNodes, *scaleLeases, time.Since(start).Round(time.Millisecond))
		seeded = scaleFlags(*scaleNodes)
	}
	start := time.Now()
	pods, uids := createPods(t, podNS, 3600)
	t.Logf("created %d pods in %v", len(pods), time.Since(start).Round(time.Millisecond))
	logs, err := os.CreateTemp("", "kstore-replicas-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var logMu sync.Mutex
	logw := writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(b)
	})
	t.Logf("replica logs: %s", logs.Name())
	kc := writeKubeconfig(t)
	// Every acquire is for a bare pod of one namespace, so a lease each.
	flags := append([]string{"--max-leases-per-namespace=0"}, seeded...)
	replicas := []*replica{startReplica(t, ns, "r0", kc, logw, flags...), startReplica(t, ns, "r1", kc, logw, flags...),
		startReplica(t, ns, "r2", kc, logw, flags...)}
	var (
		mu       sync.Mutex
		acked    = map[string]uint32{} // lease key -> vni
		ackedBy  = map[string]int{}    // replica id -> acks
		leaderID atomic.Value          // replica that answered last
		next     atomic.Int64
	)
	leaderID.Store("")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	acquire := func(r *replica, n int) (string, uint32, error) {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		l, err := r.client.AcquireJobVNI(cctx, &apiv1.AcquireJobVNIRequest{
			Pod:  &apiv1.PodRef{Namespace: podNS, Name: pods[n], Uid: uids[n]},
			Node: fmt.Sprintf("node-%d", n%50)})
		if err != nil {
			return "", 0, err
		}
		return l.GetKey(), l.GetVni(), nil
	}
	// Each client tries the replica that answered last, then the others.
	var wg sync.WaitGroup
	var otherErrs atomic.Int64
	var lastErr atomic.Value
	for c := range 32 {
		wg.Go(func() {
			n := int(next.Add(1)) - 1
			for ctx.Err() == nil && n < len(pods) {
				order := replicas
				for i, r := range replicas {
					if r.id == leaderID.Load() {
						order = append([]*replica{r}, append(append([]*replica{}, replicas[:i]...), replicas[i+1:]...)...)
					}
				}
				ok := false
				for _, r := range order {
					key, vni, err := acquire(r, n)
					if err == nil {
						ok = true
						n = int(next.Add(1)) - 1
						mu.Lock()
						acked[key] = vni
						ackedBy[r.id]++
						mu.Unlock()
						leaderID.Store(r.id)
						break
					}
					if ctx.Err() != nil {
						return
					}
					if s, _ := status.FromError(err); s.Code() != codes.Unavailable {
						otherErrs.Add(1)
						lastErr.Store(fmt.Sprintf("client %d via %s: %v", c, r.id, err))
					}
				}
				if !ok {
					// No leader now: pace the retries as an agent does.
					_ = backoff.Sleep(ctx, 50*time.Millisecond)
				}
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitAcks := func(n int, within time.Duration) {
		t.Helper()
		deadline := time.NewTimer(within)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for count() < n {
			select {
			case <-deadline.C:
				t.Fatalf("%d acks after %v, want %d (last error: %v)", count(), within, n, lastErr.Load())
			case <-tick.C:
			}
		}
	}
	// firstAckAfter returns when a replica other than old first answers.
	firstAckFrom := func(old string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.NewTimer(within)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if id := leaderID.Load().(string); id != "" && id != old {
				return time.Since(start)
			}
			select {
			case <-deadline.C:
				t.Fatalf("no replica but %s answered within %v (last error: %v)", old, within, lastErr.Load())
			case <-tick.C:
			}
		}
	}
	byID := func(id string) *replica {
		for _, r := range replicas {
			if r.id == id {
				return r
			}
		}
		t.Fatalf("no replica %s", id)
		return nil
	}

	waitAcks(1000, 3*time.Minute)
	first := leaderID.Load().(string)
	before := count()
	if err := byID(first).cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crashFailover := firstAckFrom(first, time.Minute)
	second := leaderID.Load().(string)
	crashLoad := lastLoad(byID(second))
	t.Logf("SIGKILL of leader %s after %d acks: %s answered %v later", first, before, second, crashFailover.Round(time.Millisecond))
	waitAcks(count()+1000, 3*time.Minute)
	before = count()
	if err := byID(second).cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cleanFailover := firstAckFrom(second, time.Minute)
	third := leaderID.Load().(string)
	cleanLoad := lastLoad(byID(third))
	t.Logf("SIGTERM of leader %s after %d acks: %s answered %v later", second, before, third, cleanFailover.Round(time.Millisecond))
	waitAcks(count()+1000, 3*time.Minute)
	cancel()
	wg.Wait()
	if err := byID(third).cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-byID(third).exited; err != nil {
		t.Errorf("replica %s: %v", third, err)
	}
	byID(third).exited <- nil
	if n := otherErrs.Load(); n > 0 {
		t.Logf("%d calls failed with errors other than Unavailable (deadline while the leader died, ...); last: %v", n, lastErr.Load())
	}

	// The store, read back directly: every acknowledged lease, unique VNIs.
	list, err := dynamicClient(t).Resource(kube.LeaseResource).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]uint32{}
	byVNI := map[int64]string{}
	for _, u := range list.Items {
		key, _, _ := unstructuredString(u.Object, "spec", "leaseKey")
		vni, _, _ := unstructuredInt(u.Object, "spec", "vni")
		if other, ok := byVNI[vni]; ok {
			t.Errorf("vni %d leased to %s and %s", vni, other, key)
		}
		byVNI[vni] = key
		stored[key] = uint32(vni)
	}
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for key, vni := range acked {
		got, ok := stored[key]
		if !ok || got != vni {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged lease %s (vni %d) stored as %d (present %v)", key, vni, got, ok)
			}
		}
	}
	if *failoverScale {
		for i := range *scaleLeases {
			want := scaleLease(i, *scaleNodes)
			if got, ok := stored[want.Key]; !ok || got != uint32(want.VNI) {
				lost++
				if lost <= 10 {
					t.Errorf("seeded lease %s (vni %d) stored as %d (present %v)", want.Key, want.VNI, got, ok)
				}
			}
		}
	}
	t.Logf("%d leases acknowledged (%v by replica), %d stored, %d lost", len(acked), ackedBy, len(stored), lost)
	t.Logf("failover: %d nodes' slices, %d leases in the store: SIGKILL %v (new leader's load: %s), SIGTERM %v (load: %s)",
		*scaleNodes*boolInt(*failoverScale), len(stored), crashFailover.Round(time.Millisecond), crashLoad,
		cleanFailover.Round(time.Millisecond), cleanLoad)
	if lost > 0 {
		t.Errorf("%d acknowledged leases lost", lost)
	}
	if len(ackedBy) < 3 {
		t.Errorf("acks came from %v, want all three replicas in turn", ackedBy)
	}
}

var failoverScale = flag.Bool("failover.scale", false, "seed the store with -scale.nodes nodes' slices and -scale.leases leases first")

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lastLoad returns the took and mirrored fields of the newest "store
// loaded" line r logged, or "?" when it logged none.
func lastLoad(r *replica) string {
	out := "?"
	for {
		select {
		case line := <-r.loads:
			var l struct {
				Took     int64    `json:"took"`
				Mirrored []string `json:"mirrored"`
			}
			if json.Unmarshal([]byte(line), &l) == nil {
				out = fmt.Sprintf("%v, from the mirror: %v", time.Duration(l.Took).Round(time.Millisecond), l.Mirrored)
			}
		default:
			return out
		}
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	v, ok, err := nested(obj, path...)
	s, _ := v.(string)
	return s, ok, err
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	v, ok, err := nested(obj, path...)
	i, _ := v.(int64)
	return i, ok, err
}

func nested(obj map[string]any, path ...string) (any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, errors.New("not an object")
		}
		if cur, ok = m[p]; !ok {
			return nil, false, nil
		}
	}
	return cur, true, nil
}

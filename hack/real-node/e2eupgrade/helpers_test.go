package e2eupgrade

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/netns"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// The controller's stores (the chart's controller.store).
const (
	storeSQLite = "sqlite"
	storeKube   = "kube"
)

// storeValues are the chart values of the controller's store.
func storeValues(store string) map[string]any {
	return map[string]any{"controller": map[string]any{"store": store}}
}

// agentsHeld are docs/upgrade.md's values of the controller's upgrade:
// the DaemonSet's OnDelete strategy lets Helm change it without
// replacing an agent.
func agentsHeld(store string) map[string]any {
	v := storeValues(store)
	v["agent"] = map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}}
	return v
}

// deploy brings the release to src's chart and images on store, both
// the agent and the controller running them (a resumed controller, a
// rolling update), whatever state an earlier test left; it returns the
// release's revision.
func deploy(t *testing.T, src *cluster.Source, store string) int {
	t.Helper()
	ctx := t.Context()
	if err := env.ResumeController(ctx); err != nil {
		t.Fatal(err)
	}
	rev, err := env.Upgrade(ctx, src, storeValues(store))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.WaitRuns(ctx, src, src); err != nil {
		t.Fatal(err)
	}
	t.Logf("release at revision %d: %s, store %s", rev, src, store)
	return rev
}

// resumeAtEnd resumes the controller when t ends, however it ends: the
// next test starts from a controller that rolls.
func resumeAtEnd(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		if err := env.ResumeController(ctx); err != nil {
			t.Errorf("resume the controller: %v", err)
		}
	})
}

// podState is what one pod has of the fabric: the Slingshot environment
// its workload was started with, its env file, and the services of the
// driver that admit its network namespace.
type podState struct {
	Key   string
	Netns uint32
	// Env and EnvFile are the SLINGSHOT_ variables of the workload's
	// environment (CDI) and of its env file, "K=V" sorted.
	Env, EnvFile []string
	// VNI is the job's, the first of SLINGSHOT_VNIS.
	VNI uint16
	// Services are the driver's services admitting Netns.
	Services []simstate.Service
}

// readPod reads p's state from the node's /proc and the simulated
// driver's files. It returns errors rather than failing a test, so that
// a watch of its own goroutine can call it.
func readPod(p corev1.Pod) (podState, error) {
	st := podState{Key: p.Namespace + "/" + p.Name}
	procs, err := cluster.PodProcesses(string(p.UID))
	if err != nil {
		return st, fmt.Errorf("pod %s: %w", st.Key, err)
	}
	var app *cluster.Process
	for i, pr := range procs {
		if strings.HasSuffix(pr.Exe, "/workload") {
			app = &procs[i]
		}
	}
	if app == nil {
		return st, fmt.Errorf("pod %s: no workload process among %d", st.Key, len(procs))
	}
	if st.Netns, err = netns.ParseNetnsLink(app.Netns); err != nil {
		return st, fmt.Errorf("pod %s: %w", st.Key, err)
	}
	st.Env = slingshotVars(app.Env)
	file, err := cluster.EnvFile(app.Pid, cluster.ContainerEnvFile)
	if err != nil {
		return st, fmt.Errorf("pod %s: env file: %w", st.Key, err)
	}
	st.EnvFile = slingshotVars(file)
	st.VNI = cluster.FirstVNI(app.Env["SLINGSHOT_VNIS"])
	if st.Services, err = env.ServicesOf(st.Netns); err != nil {
		return st, fmt.Errorf("pod %s: %w", st.Key, err)
	}
	return st, nil
}

func slingshotVars(env map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, "SLINGSHOT_") {
			out = append(out, k+"="+env[k])
		}
	}
	return out
}

// isolated says how a pod's state falls short of what the pod path
// promises, nil when it does not: a job VNI, the same values in its
// environment and its env file, and one enabled service on each of its
// NICs (SLINGSHOT_DEVICES, with the IDs of SLINGSHOT_SVC_IDS) that admits
// its network namespace alone and carries the job's VNI.
func (st podState) isolated() error {
	var errs []error
	if st.VNI == 0 {
		errs = append(errs, fmt.Errorf("pod %s: no job VNI in %v", st.Key, st.Env))
	}
	if !slices.Equal(st.Env, st.EnvFile) {
		errs = append(errs, fmt.Errorf("pod %s: environment %v, env file %v", st.Key, st.Env, st.EnvFile))
	}
	vars := map[string]string{}
	for _, kv := range st.Env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	devs, ids := strings.Split(vars["SLINGSHOT_DEVICES"], ","), strings.Split(vars["SLINGSHOT_SVC_IDS"], ",")
	var want []string
	for i := range min(len(devs), len(ids)) {
		want = append(want, devs[i]+"/"+ids[i])
	}
	var got []string
	for _, s := range st.Services {
		got = append(got, s.NIC+"/"+strconv.FormatUint(uint64(s.ID), 10))
		if !s.Enabled || !s.OnlyNetns(st.Netns) || !slices.Contains(s.VNIs, st.VNI) {
			errs = append(errs, fmt.Errorf("pod %s: service %s/%d enabled=%v open=%v uids=%v gids=%v netns=%v vnis=%v; want enabled, admitting netns %d alone, VNI %d",
				st.Key, s.NIC, s.ID, s.Enabled, s.Open, s.UIDs, s.GIDs, s.NetNS, s.VNIs, st.Netns, st.VNI))
		}
	}
	if len(want) == 0 || len(devs) != len(ids) || !slices.Equal(got, want) {
		errs = append(errs, fmt.Errorf("pod %s: the driver's services admitting it %v, its environment names %v (%v)", st.Key, got, want, st.Env))
	}
	return errors.Join(errs...)
}

// diff says how a pod's state now differs from before, "" when it does
// not: the same services (IDs, members, VNIs, traffic classes, enabled),
// the same environment and env file, the same VNI.
func (st podState) diff(now podState) string {
	var out []string
	if now.Netns != st.Netns {
		out = append(out, fmt.Sprintf("netns %d, now %d", st.Netns, now.Netns))
	}
	if !slices.Equal(now.Env, st.Env) {
		out = append(out, fmt.Sprintf("environment %v, now %v", st.Env, now.Env))
	}
	if !slices.Equal(now.EnvFile, st.EnvFile) {
		out = append(out, fmt.Sprintf("env file %v, now %v", st.EnvFile, now.EnvFile))
	}
	if now.VNI != st.VNI {
		out = append(out, fmt.Sprintf("VNI %d, now %d", st.VNI, now.VNI))
	}
	if b, a := fmt.Sprintf("%+v", st.Services), fmt.Sprintf("%+v", now.Services); a != b {
		out = append(out, fmt.Sprintf("services %s, now %s", b, a))
	}
	if len(out) == 0 {
		return ""
	}
	return "pod " + st.Key + ": " + strings.Join(out, "; ")
}

// job is a running Job of the test and the state of its pods.
type job struct {
	ns, name string
	vni      uint16
	pods     []corev1.Pod
	states   []podState
}

// jobRoom is how many pods a Job may run in all (its completions): room
// for the pods added after each step, which run until deleted.
const jobRoom = 8

// startJob runs a Job of pods pods, one NIC each, and checks that every
// pod is isolated on the Job's one VNI.
func startJob(t *testing.T, ns, name string, pods int) *job {
	t.Helper()
	spec := cluster.Job(name, pods, 1)
	spec.Spec.Completions = ptr.To(int32(jobRoom))
	running, err := env.RunJob(t.Context(), ns, spec)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{ns: ns, name: name}
	for _, p := range running {
		j.add(t, p)
	}
	return j
}

// add reads a running pod of the Job, checks it isolated on the Job's VNI
// and adds it to the Job's pods.
func (j *job) add(t *testing.T, p corev1.Pod) {
	t.Helper()
	st, err := readPod(p)
	if err == nil {
		err = st.isolated()
	}
	if err != nil {
		t.Fatalf("job %s: %v\n%s", j.name, err, env.Describe(t.Context()))
	}
	if j.vni == 0 {
		j.vni = st.VNI
	}
	if st.VNI != j.vni {
		t.Fatalf("job %s: pod %s on VNI %d, its Job's pods on %d", j.name, st.Key, st.VNI, j.vni)
	}
	j.pods, j.states = append(j.pods, p), append(j.states, st)
}

// grow starts one more pod of the Job (its parallelism raised by one)
// and checks that it runs isolated on the Job's VNI.
func (j *job) grow(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	n := len(j.pods) + 1
	if err := env.ScaleJob(ctx, j.ns, j.name, n); err != nil {
		t.Fatal(err)
	}
	running, err := env.WaitRunning(ctx, j.ns, "e2e-job="+j.name, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range running {
		if !slices.ContainsFunc(j.pods, func(q corev1.Pod) bool { return q.UID == p.UID }) {
			j.add(t, p)
			t.Logf("job %s: new pod %s on VNI %d", j.name, p.Name, j.vni)
			return
		}
	}
	t.Fatalf("job %s: no new pod among %d", j.name, len(running))
}

// changed says how the Jobs' pods differ now from their recorded
// states, "" when none does; a read that fails is a change too (a pod
// whose workload is gone).
func changed(jobs ...*job) string {
	var out []string
	for _, j := range jobs {
		for i, p := range j.pods {
			now, err := readPod(p)
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			if d := j.states[i].diff(now); d != "" {
				out = append(out, d)
			}
		}
	}
	return strings.Join(out, "\n")
}

// holders checks that the controller records this node, and only it, as
// the holder of each Job's VNI.
func holders(t *testing.T, jobs ...*job) {
	t.Helper()
	for _, j := range jobs {
		got, err := env.VNIHolders(t.Context(), j.vni)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{env.Node.Name}) {
			t.Errorf("job %s: VNI %d held by %v at the controller, want [%s]", j.name, j.vni, got, env.Node.Name)
		}
	}
}

// keeps runs step (a change of the release) while a goroutine of its own
// reads the Jobs' pods every 200 ms, and then watches them 5 s more (the
// window in which a new agent reconciles); it fails t at the first change
// it saw, and checks the controller's holds after.
func keeps(t *testing.T, what string, step func(t *testing.T), jobs ...*job) {
	t.Helper()
	start := time.Now()
	if d := watchWhile(t, step, jobs...); d != "" {
		t.Fatalf("%s: the pods' state changed:\n%s\n%s", what, d, env.Describe(t.Context()))
	}
	if err := env.HoldsFor(t.Context(), 5*time.Second, func(context.Context) string { return changed(jobs...) }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	holders(t, jobs...)
	t.Logf("%s: in %s; every pod kept its services, environment and VNI", what, time.Since(start).Round(time.Millisecond))
}

// watchWhile runs step while a goroutine reads the Jobs' pods every
// 200 ms, and returns the first change it saw, "" when none. The
// goroutine ends before watchWhile returns, also when step fails t.
func watchWhile(t *testing.T, step func(t *testing.T), jobs ...*job) string {
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if d := changed(jobs...); d != "" {
				first <- d
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	step(t)
	cancel()
	<-done
	select {
	case d := <-first:
		return d
	default:
		return ""
	}
}

// endJobs deletes the Jobs and waits until their pods are gone, the
// driver has no service left but its own and the controller has freed
// the Jobs' VNIs.
func endJobs(t *testing.T, jobs ...*job) {
	t.Helper()
	ctx := t.Context()
	var vnis []uint16
	for _, j := range jobs {
		if err := env.DeleteJob(ctx, j.ns, j.name); err != nil {
			t.Fatal(err)
		}
		vnis = append(vnis, j.vni)
	}
	for _, j := range jobs {
		if _, err := env.WaitPodsGone(ctx, j.ns, "e2e-job="+j.name); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := env.WaitCleanedUp(ctx, cluster.Cleanup{
		Leftovers: []cluster.Leftover{env.DriverEmpty(), env.VNIsReleased(vnis...)},
		Interval:  200 * time.Millisecond, Timeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pods gone: the driver has only its own services and VNIs %v are released, %s after", vnis, time.Since(start).Round(time.Millisecond))
}

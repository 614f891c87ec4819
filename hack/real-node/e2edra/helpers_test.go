package e2edra

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// createTemplate makes a ResourceClaimTemplate of one NIC with the opaque
// configuration vni in ns.
func createTemplate(t *testing.T, ns, name, vni string) {
	t.Helper()
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), cluster.NICClaimTemplate(name, 1, vni), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// svcKey names a service: "cxi0/3".
func svcKey(nic string, id uint32) string { return fmt.Sprintf("%s/%d", nic, id) }

// svcCheck is one of the workload's svccheck lines: a service as the
// driver held it when the container's program started.
type svcCheck struct {
	simstate.Service
	Found bool   `json:"found"`
	Error string `json:"error"`
	Self  uint32 `json:"self"`
}

// draPod is what the node shows of one running pod with a claim: what it
// shows of any pod (cluster.PodView) and what DRA adds.
type draPod struct {
	cluster.PodView
	// Devices and SvcIDs are the parsed SLINGSHOT_DEVICES and
	// SLINGSHOT_SVC_IDS of the workload's environment.
	Devices []string
	SvcIDs  []uint32
	// Claims are the pod's ResourceClaims; Allocated their devices.
	Claims    []*resourcev1.ResourceClaim
	Allocated []string
	// Services are the services SLINGSHOT_DEVICES and SLINGSHOT_SVC_IDS
	// name, as the driver holds them now; Missing those it has not.
	Services []simstate.Service
	Missing  []string
	// Checks are the workload's svccheck lines.
	Checks []svcCheck
	// Reported are the agent's report (inspect) of the pod's claims, by
	// claim UID, and of the services the environment names, by svcKey:
	// with DRA the report names no pod in a service, so the pod's are
	// found by their NIC and ID.
	Reported    map[string]inspect.Claim
	ReportedSvc map[string]inspect.Service
}

func viewDRAPod(t *testing.T, ctx context.Context, p corev1.Pod) draPod {
	t.Helper()
	v := draPod{PodView: env.ViewPod(t, p)}
	v.Devices = splitList(v.Env["SLINGSHOT_DEVICES"])
	for _, s := range splitList(v.Env["SLINGSHOT_SVC_IDS"]) {
		id, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Errorf("pod %s: SLINGSHOT_SVC_IDS %q: %v", v.Key, v.Env["SLINGSHOT_SVC_IDS"], err)
		}
		v.SvcIDs = append(v.SvcIDs, uint32(id))
	}
	claims, err := env.PodClaims(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		v.Claims = append(v.Claims, c)
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Driver == cluster.DRADriver {
					v.Allocated = append(v.Allocated, r.Device)
				}
			}
		}
	}
	sort.Strings(v.Allocated)
	for i, nic := range v.Devices {
		if i >= len(v.SvcIDs) {
			break
		}
		s, ok, err := simstate.Find(env.SimStateDir, nic, v.SvcIDs[i])
		switch {
		case err != nil:
			t.Fatalf("pod %s: %v", v.Key, err)
		case ok:
			v.Services = append(v.Services, s)
		default:
			v.Missing = append(v.Missing, svcKey(nic, v.SvcIDs[i]))
		}
	}
	// The workload prints its svccheck lines after it starts: a pod seen
	// Running may not have printed them yet. Wait, bounded, for one per
	// device; checkBound then tells what is missing.
	deadline := time.Now().Add(10 * time.Second)
	for v.Checks = serviceChecks(t, ctx, p); len(v.Checks) < len(v.Devices) && time.Now().Before(deadline); v.Checks = serviceChecks(t, ctx, p) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	rep, err := env.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v.Reported, v.ReportedSvc = map[string]inspect.Claim{}, map[string]inspect.Service{}
	for _, c := range rep.Claims {
		for _, pc := range v.Claims {
			if c.UID == string(pc.UID) {
				v.Reported[c.UID] = c
			}
		}
	}
	for _, s := range rep.Services {
		for i, nic := range v.Devices {
			if i < len(v.SvcIDs) && s.NIC == nic && s.ID == v.SvcIDs[i] {
				v.ReportedSvc[svcKey(s.NIC, s.ID)] = s
			}
		}
	}
	return v
}

// serviceChecks reads the workload's svccheck lines from its log.
func serviceChecks(t *testing.T, ctx context.Context, p corev1.Pod) []svcCheck {
	t.Helper()
	var out []svcCheck
	sc := bufio.NewScanner(strings.NewReader(env.PodLog(ctx, p.Namespace, p.Name)))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "svccheck ")
		if !ok {
			continue
		}
		var c svcCheck
		if err := json.Unmarshal([]byte(rest), &c); err != nil {
			t.Errorf("pod %s/%s: svccheck line %q: %v", p.Namespace, p.Name, rest, err)
			continue
		}
		out = append(out, c)
	}
	return out
}

// checkBound checks one pod: it has the SLINGSHOT_* environment of its
// allocated NICs and their /dev/cxiN; each service it names exists,
// carries the job VNI, admits exactly the pod's network namespace and is
// enabled (checkRunsBound); and each was already so when the container's
// program started (checkStartedBound).
func checkBound(t *testing.T, v draPod) {
	t.Helper()
	checkRunsBound(t, v)
	checkStartedBound(t, v)
}

// checkRunsBound is checkBound but for what the services were when the
// container started.
func checkRunsBound(t *testing.T, v draPod) {
	t.Helper()
	cluster.CheckBound(t, v.PodView, len(v.Devices))
	for _, k := range []string{"SLINGSHOT_DEVICES", "SLINGSHOT_SVC_IDS", "SLINGSHOT_VNIS", "SLINGSHOT_TCS"} {
		if v.Env[k] == "" {
			t.Errorf("pod %s: %s empty or unset in the container's environment: %v", v.Key, k, v.Env)
		}
	}
	if got := slices.Sorted(slices.Values(v.Devices)); len(v.Allocated) == 0 || !slices.Equal(got, v.Allocated) {
		t.Errorf("pod %s: SLINGSHOT_DEVICES %v, claims allocated %v", v.Key, v.Devices, v.Allocated)
	}
	if len(v.SvcIDs) != len(v.Devices) {
		t.Errorf("pod %s: SLINGSHOT_SVC_IDS %v for SLINGSHOT_DEVICES %v", v.Key, v.SvcIDs, v.Devices)
	}
	for _, d := range v.Devices {
		if err := charDevice(v.App.Pid, "/dev/"+d); err != nil {
			// Where the node's device node is instead, if anywhere.
			instead := "nowhere else"
			if hp := filepath.Join(env.Machine.DevRoot, d); charDevice(v.App.Pid, hp) == nil {
				instead = "at its host path " + hp
			}
			t.Errorf("pod %s: /dev/%s in the container: %v; the device is %s", v.Key, d, err, instead)
		}
	}
	if len(v.Missing) > 0 {
		t.Errorf("pod %s: services %v named in its environment are not in the driver", v.Key, v.Missing)
	}
	// CheckBound checked the services admitting the pod; those its
	// environment names must be among them, or the program would open
	// services that do not admit it.
	for _, s := range v.Services {
		if !slices.ContainsFunc(v.Admitting, func(a simstate.Service) bool { return a.NIC == s.NIC && a.ID == s.ID }) {
			t.Errorf("pod %s: service %s named in its environment does not admit its namespace %d: enabled=%v open=%v uids=%v gids=%v netns=%v vnis=%v",
				v.Key, svcKey(s.NIC, s.ID), v.Netns, s.Enabled, s.Open, s.UIDs, s.GIDs, s.NetNS, s.VNIs)
		}
	}
	for _, c := range v.Claims {
		r, ok := v.Reported[string(c.UID)]
		var want []string
		for i, nic := range v.Devices {
			if i < len(v.SvcIDs) {
				want = append(want, fmt.Sprintf("%s:%d@%d", nic, v.SvcIDs[i], v.Netns))
			}
		}
		if !ok || r.State != "bound" || r.BoundPod != v.UID || !slices.Equal(slices.Sorted(slices.Values(r.Services)), slices.Sorted(slices.Values(want))) {
			t.Errorf("pod %s: the agent reports claim %s as %+v (found %v); want bound to the pod (uid %s) with services %v", v.Key, c.Name, r, ok, v.UID, want)
		}
	}
	var reported []inspect.Service
	for i, nic := range v.Devices {
		if i < len(v.SvcIDs) {
			if s, ok := v.ReportedSvc[svcKey(nic, v.SvcIDs[i])]; ok {
				reported = append(reported, s)
			}
		}
	}
	cluster.CheckReported(t, v.PodView, reported, len(v.Devices))
}

// checkStartedBound checks the workload's svccheck lines: each service
// the container's environment names was, when its program started,
// enabled with the pod's namespace alone.
func checkStartedBound(t *testing.T, v draPod) {
	t.Helper()
	if len(v.Checks) != len(v.Devices) {
		t.Errorf("pod %s: %d svccheck lines for %d devices: %+v", v.Key, len(v.Checks), len(v.Devices), v.Checks)
	}
	for _, c := range v.Checks {
		if !c.Found || c.Error != "" || !c.Enabled || c.Self != v.Netns || !c.OnlyNetns(v.Netns) {
			t.Errorf("pod %s: when the container started, service %s was found=%v enabled=%v netns=%v (the program's own: %d, the pod's: %d) error=%q; want enabled with only the pod's namespace",
				v.Key, svcKey(c.NIC, c.ID), c.Found, c.Enabled, c.NetNS, c.Self, v.Netns, c.Error)
		}
	}
}

// charDevice checks that path in the root of process pid is a character
// device.
func charDevice(pid int, path string) error {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/root%s", pid, path), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("mode %o, not a character device", st.Mode)
	}
	return nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// claimSpecs lists the CDI spec files of a claim (named after its UID).
func claimSpecs(t *testing.T, c *resourcev1.ResourceClaim) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(env.Node.CDIDir, "*"+string(c.UID)+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// draState is what must survive restarts of the kubelet and the agent
// with a Job's pods running: their services as the driver holds them,
// their claims' CDI specs, the job VNI and the controller's holders of it.
type draState struct {
	Services map[string]simstate.Service // by svcKey
	Specs    []string
	JobVNI   uint16
	Holders  []string
}

func captureDRA(t *testing.T, ctx context.Context, pods []corev1.Pod) draState {
	t.Helper()
	st := draState{Services: map[string]simstate.Service{}}
	for _, p := range pods {
		v := viewDRAPod(t, ctx, p)
		st.JobVNI = v.JobVNI()
		for _, s := range v.Services {
			st.Services[svcKey(s.NIC, s.ID)] = s
		}
		for _, c := range v.Claims {
			st.Specs = append(st.Specs, claimSpecs(t, c)...)
		}
	}
	sort.Strings(st.Specs)
	st.Holders = vniHolders(t, ctx, st.JobVNI)
	return st
}

// vniHolders are the nodes the controller lists as holding vni.
func vniHolders(t *testing.T, ctx context.Context, vni uint16) []string {
	t.Helper()
	holders, err := env.VNIHolders(ctx, vni)
	if err != nil {
		t.Fatal(err)
	}
	return holders
}

// currentDRA reads the services, specs and holders of before again.
func currentDRA(t *testing.T, ctx context.Context, before draState) draState {
	t.Helper()
	now := draState{Services: map[string]simstate.Service{}, JobVNI: before.JobVNI}
	for _, s := range before.Services {
		cur, ok, err := simstate.Find(env.SimStateDir, s.NIC, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			now.Services[svcKey(s.NIC, s.ID)] = cur
		}
	}
	for _, p := range before.Specs {
		if _, err := os.Stat(p); err == nil {
			now.Specs = append(now.Specs, p)
		}
	}
	now.Holders = vniHolders(t, ctx, before.JobVNI)
	return now
}

func diffDRA(before, after draState) string {
	var out []string
	for k, s := range before.Services {
		a, ok := after.Services[k]
		if !ok || a.Enabled != s.Enabled || !slices.Equal(a.NetNS, s.NetNS) || !slices.Equal(a.VNIs, s.VNIs) || a.Open != s.Open {
			out = append(out, fmt.Sprintf("service %s: %+v, now %+v (present %v)", k, s, a, ok))
		}
	}
	if !slices.Equal(before.Specs, after.Specs) {
		out = append(out, fmt.Sprintf("CDI specs %v, now %v", before.Specs, after.Specs))
	}
	if !slices.Equal(before.Holders, after.Holders) {
		out = append(out, fmt.Sprintf("VNI %d held by %v, now %v", before.JobVNI, before.Holders, after.Holders))
	}
	return strings.Join(out, "\n")
}

// holdsFor watches the state for d and fails at the first change: what a
// restart must not do, it would do in that window.
func holdsFor(t *testing.T, ctx context.Context, before draState, d time.Duration) {
	t.Helper()
	err := env.HoldsFor(ctx, d, func(ctx context.Context) string {
		return diffDRA(before, currentDRA(t, ctx, before))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitDRACleanedUp waits until the services are gone from the driver, the
// CDI specs from the node, the claims from the API server, and the node's
// hold on vni (when not 0) from the controller; it returns when that was
// first seen.
func waitDRACleanedUp(ctx context.Context, svcs []simstate.Service, specs []string, claims []*resourcev1.ResourceClaim, vni uint16) (time.Time, error) {
	return env.WaitCleanedUp(ctx, cluster.Cleanup{
		VNI: vni,
		Leftovers: []cluster.Leftover{
			env.DriverServicesGone(svcs), cluster.FilesGone("CDI spec", specs), env.ClaimsGone(claims),
		},
		Interval: 100 * time.Millisecond, Timeout: 2 * time.Minute,
	})
}

// waitPodWarning waits for a warning event on a pod in ns (on the pod
// named pod, when not "") whose message match accepts, and returns it as
// "Reason: message"; it fails the test with what it waited for.
func waitPodWarning(t *testing.T, ctx context.Context, ns, pod, what string, match func(msg string) bool) string {
	t.Helper()
	why, err := env.WaitPodWarning(ctx, ns, pod, match)
	if err != nil {
		t.Fatalf("no warning event on the pod %s: %v\n%s", what, err, env.Describe(ctx))
	}
	t.Logf("event: %s", why)
	return why
}

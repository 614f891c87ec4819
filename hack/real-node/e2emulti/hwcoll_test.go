package e2emulti

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
)

// The fake fabric manager's settings: the chart's controller.hwcoll values
// and the OAuth client credentials in the Secret they name.
const (
	fmSecret       = "fabric-manager-oauth"
	fmClientID     = "slingshot-e2e"
	fmClientSecret = "e2e-client-secret"
	fmAddrsPerJob  = 4
	// fmJobPrefix is the chart's default controller.hwcoll.jobPrefix.
	fmJobPrefix = "k8s"
	// fmMinNodes is the chart's default controller.hwcoll.minNodes.
	fmMinNodes = 2
)

// fm is the fake fabric manager, nil outside the node's init.
var fm *fabricManager

// fabricManager is the fake fabric manager the controller reserves
// hardware collectives at, over real HTTP with OAuth. This process serves
// it on every address of its network namespace, which holds the
// cluster's bridge: the controller's node reaches it at
// node.ControlPlaneIP, as it reaches the API server.
type fabricManager struct {
	*fakefm.FM
	URL string
	srv *http.Server
}

// startFabricManager serves a fake fabric manager until Close.
func startFabricManager() (*fabricManager, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, err
	}
	f := &fabricManager{
		FM:  fakefm.New(fakefm.Options{ClientID: fmClientID, ClientSecret: fmClientSecret}),
		URL: "http://" + net.JoinHostPort(node.ControlPlaneIP, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)),
	}
	f.srv = &http.Server{Handler: f.FM, ReadHeaderTimeout: 10 * time.Second}
	// Owned by TestMain's run, which closes it after the tests.
	go func() {
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("fake fabric manager:", err)
		}
	}()
	return f, nil
}

// Close stops serving.
func (f *fabricManager) Close() { _ = f.srv.Close() }

// configure turns hardware collectives on in the chart values, against
// f, with its OAuth client credentials in a Secret the chart mounts.
func (f *fabricManager) configure(o *cluster.Options) {
	o.Values["controller"].(map[string]any)["hwcoll"] = map[string]any{
		"fmURL": f.URL, "addrsPerJob": fmAddrsPerJob, "oauthSecret": fmSecret,
	}
	o.Secrets = append(o.Secrets, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: fmSecret},
		StringData: map[string]string{
			hwcoll.OAuthEndpointFile:     f.URL + fakefm.TokenPath,
			hwcoll.OAuthClientIDFile:     fmClientID,
			hwcoll.OAuthClientSecretFile: fmClientSecret,
		},
	})
}

// TestMultiHWCollectives: with hardware collectives on (the chart's
// controller.hwcoll, the fake fabric manager with OAuth from a Secret), a
// Job with a pod on each node has one reservation at the fabric manager,
// made once for both nodes, and both containers get the FI_CXI_COLL_* and
// FI_CXI_HWCOLL_* variables naming it. The controller is then SIGKILLed
// and the Job deleted while it comes back: the reservation is released
// once it is, and the Job leaves nothing at the fabric manager.
func TestMultiHWCollectives(t *testing.T) {
	needAPI(t, cluster.APIDevicePlugin)
	ctx := t.Context()
	ns := env.TestNamespace(t, "hwcoll")
	// Reservations made from here on: this test's alone, the tests
	// running one at a time.
	made := fm.Created()
	byNode := runSpread(t, ns, spread(cluster.Job("coll", nodes, 1)))
	id := checkCollectives(t, ns, "coll", byNode, made)

	// The controller's process, SIGKILLed: the kubelet restarts its
	// container, its state kept on the pod's volume.
	controller := controllerPod(t)
	pid := controllerProcess(t, controller)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller pid %d SIGKILLed", pid)
	if err := env.DeleteJob(ctx, ns, "coll"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the Job's reservation released at the fabric manager", func() (bool, string) {
		_, held := fm.Jobs()[id]
		return !held, fmt.Sprintf("reservations %v", slices.Sorted(maps.Keys(fm.Jobs())))
	})
	waitFor(t, time.Minute, "the controller's container restarted and ready", func() (bool, string) {
		p := controllerPod(t)
		return p.UID == controller.UID && restarts(p) > restarts(controller) && ready(p), fmt.Sprintf("pod %s, restarts %d, ready %v", p.UID, restarts(p), ready(p))
	})
	if n := fm.Created() - made; n != 1 {
		t.Errorf("%d reservations made for the Job across the restart, want 1", n)
	}
}

// checkCollectives checks the hardware collectives of the running Job
// name, whose pods byNode holds: one reservation at the fabric manager,
// made since it had made made, and each pod's container with the
// variables naming it. It returns the reservation's job ID.
func checkCollectives(t *testing.T, ns, name string, byNode map[string]corev1.Pod, made int) string {
	t.Helper()
	job, err := env.Node.Client.BatchV1().Jobs(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := fmJobPrefix + "-" + string(job.UID)
	r, ok := fm.Jobs()[id]
	if !ok {
		t.Fatalf("no reservation %s at the fabric manager; it has %v", id, slices.Sorted(maps.Keys(fm.Jobs())))
	}
	if r.MCastLimit != fmAddrsPerJob {
		t.Errorf("reservation %s of %d addresses, want %d", id, r.MCastLimit, fmAddrsPerJob)
	}
	if n := fm.Created() - made; n != 1 {
		t.Errorf("%d reservations made for Job %s's pods on %d nodes, want 1", n, name, len(byNode))
	}
	want := map[string]string{
		engine.EnvCollJobID:      id,
		engine.EnvCollJobStepID:  "0",
		engine.EnvCollMcastToken: r.SessionToken,
		engine.EnvCollFabricMgr:  fm.URL + hwcoll.MulticastsPath,
		engine.EnvHWCollAddrs:    strconv.Itoa(fmAddrsPerJob),
		engine.EnvHWCollMinNodes: strconv.Itoa(fmMinNodes),
	}
	for node, p := range byNode {
		vars := env.ViewPod(t, p).App.Env
		for k, w := range want {
			if got, ok := vars[k]; !ok || got != w {
				t.Errorf("pod %s/%s on %s: %s=%q in its container (set: %v), want %q", p.Namespace, p.Name, node, k, got, ok, w)
			}
		}
		// The agent's report (inspect, kubectl slingshot pod) names it.
		rep, err := nodeEnv(t, node).Inspect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var reported []string
		for _, rp := range rep.Pods {
			if rp.Namespace == p.Namespace && rp.Name == p.Name {
				reported = append(reported, rp.Collectives)
			}
		}
		for _, c := range rep.Claims {
			if c.BoundPod == string(p.UID) {
				reported = append(reported, c.Collectives)
			}
		}
		if len(reported) != 1 || reported[0] != id {
			t.Errorf("%s's agent reports collectives %q for pod %s, want [%s]", node, reported, p.Name, id)
		}
	}
	return id
}

// controllerPod is the controller's one pod.
func controllerPod(t *testing.T) corev1.Pod {
	t.Helper()
	list, err := env.Node.Client.CoreV1().Pods(cluster.Namespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=controller",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("controller pods: %d, want 1", len(list.Items))
	}
	return list.Items[0]
}

// controllerProcess is the PID of the controller's program in its pod.
func controllerProcess(t *testing.T, p corev1.Pod) int {
	t.Helper()
	procs, err := cluster.PodProcesses(string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, pr := range procs {
		if strings.HasSuffix(pr.Exe, "/slingshot-controller") {
			found = append(found, pr.Pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("controller pod %s: slingshot-controller processes %v among %+v, want one", p.Name, found, procs)
	}
	return found[0]
}

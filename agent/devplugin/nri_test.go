package devplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/nri"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/cxi/sysfs"
)

// pathNetns opens namespaces by their runtime path, as the agent does
// through the host's root.
type pathNetns map[string]uint32

func (p pathNetns) open(path string) (engine.Handle, error) {
	if ino, ok := p[path]; ok {
		return &fakeHandle{ino: ino}, nil
	}
	return nil, fmt.Errorf("open network namespace %s: no such file", path)
}

// nriRig is a rig whose containers the runtime checks through NRI: the
// real adapter of package nri over the device plugin's front.
type nriRig struct {
	*rig
	plugin *nri.Plugin
	up     atomic.Bool
}

func newNRIRig(t *testing.T, netns fakeNetns, paths pathNetns) *nriRig {
	t.Helper()
	r := &nriRig{rig: newRig(t, t.TempDir(), nil, netns)}
	r.up.Store(true)
	r.b.openNetns = paths.open
	r.b.ready = func() error {
		if !r.up.Load() {
			return errors.New("the agent is not connected to the container runtime's NRI socket")
		}
		return nil
	}
	r.plugin = nri.NewPlugin(nriFront{r.b}, nri.NewState("nri.sock", nil), slog.New(slog.DiscardHandler))
	return r
}

func sandboxAt(ns, name, uid, path string) *api.PodSandbox {
	sb := &api.PodSandbox{Uid: uid, Namespace: ns, Name: name, Linux: &api.LinuxPodSandbox{}}
	if path != "" {
		sb.Linux.Namespaces = []*api.LinuxNamespace{{Type: "network", Path: path}}
	}
	return sb
}

// create is the runtime's CreateContainer of a container whose Allocate
// set SLINGSHOT_DEVICES to devs ("" for a container holding no NIC).
func (r *nriRig) create(t *testing.T, sb *api.PodSandbox, devs string) (map[string]string, error) {
	t.Helper()
	ctr := &api.Container{Name: "main", Env: []string{"PATH=/bin"}}
	if devs != "" {
		ctr.Env = append(ctr.Env, engine.EnvDevices+"="+devs, "SLINGSHOT_TCS=0xa")
	}
	adj, _, err := r.plugin.CreateContainer(t.Context(), sb, ctr)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range adj.GetEnv() {
		env[kv.GetKey()] = kv.GetValue()
	}
	return env, nil
}

// With --deviceplugin-nri, the runtime's CreateContainer lets a container
// holding the agent's NICs start only when the driver shows its pod's
// services bound to the sandbox's namespace, and sets the environment
// naming them there; anything else is refused and told on the pod.
func TestNRICreateContainerChecksTheDevicePluginsBind(t *testing.T) {
	r := newNRIRig(t, fakeNetns{"uid-a": 4026532001}, pathNetns{"/var/run/netns/a": 4026532001, "/var/run/netns/a-again": 4026532077})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0, dev1))
	if err := r.b.PreStart(t.Context(), res, []string{dev0, dev1}); err != nil {
		t.Fatal(err)
	}
	rec := r.record(t, "ns/a")

	env, err := r.create(t, sandboxAt("ns", "a", "uid-a", "/var/run/netns/a"), "cxi0,cxi1")
	if err != nil {
		t.Fatalf("a bound pod's container refused: %v", err)
	}
	want := fmt.Sprintf("%d,%d", rec.Services[0].ID, rec.Services[1].ID)
	if env["SLINGSHOT_VNIS"] != fmt.Sprint(rec.VNI) || env["SLINGSHOT_SVC_IDS"] != want || env[engine.EnvDevices] != "cxi0,cxi1" {
		t.Fatalf("environment set %v, want VNI %d and services %s", env, rec.VNI, want)
	}
	if env, err := r.create(t, sandboxAt("ns", "other", "uid-o", "/var/run/netns/a"), ""); err != nil || len(env) != 0 {
		t.Fatalf("a container holding no NIC: %v, %v; want it left alone", env, err)
	}

	for _, tc := range []struct {
		name string
		sb   *api.PodSandbox
		devs string
		want string
	}{
		{"a sandbox made again, not bound yet", sandboxAt("ns", "a", "uid-a", "/var/run/netns/a-again"), "cxi0,cxi1", "4026532077"},
		{"a pod never bound", sandboxAt("ns", "b", "uid-b", "/var/run/netns/a"), "cxi0", "was not bound on this node"},
		{"another pod of the same name", sandboxAt("ns", "a", "uid-a2", "/var/run/netns/a"), "cxi0", "was not bound on this node"},
		{"hostNetwork", sandboxAt("ns", "a", "uid-a", ""), "cxi0", "hostNetwork"},
		{"a NIC the pod has no service on", sandboxAt("ns", "a", "uid-a", "/var/run/netns/a"), "cxi0,cxi2", "no service on cxi2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(r.events.Of(event.BindRefused))
			env, err := r.create(t, tc.sb, tc.devs)
			if !errors.Is(err, ErrNotBound) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateContainer = %v, %v; want a refusal saying %q", env, err, tc.want)
			}
			ev := r.events.Of(event.BindRefused)
			if len(ev) != before+1 || ev[len(ev)-1].Obj != event.Pod(tc.sb.GetNamespace(), tc.sb.GetName(), tc.sb.GetUid()) ||
				!strings.Contains(ev[len(ev)-1].What, "Container main") {
				t.Fatalf("events %+v, want the refusal told on the pod", ev[before:])
			}
		})
	}

	// The driver lost the services (a reload) behind the agent's back.
	if err := r.drvs["cxi1"].Destroy(t.Context(), rec.Services[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.create(t, sandboxAt("ns", "a", "uid-a", "/var/run/netns/a"), "cxi0,cxi1"); !errors.Is(err, ErrNotBound) {
		t.Fatalf("a container whose service is gone from the driver: %v, want refused", err)
	}
}

// While NRI is not connected nothing would check a container at its
// creation: PreStartContainer refuses, leaving nothing, and the front end
// says why it is not ready.
func TestNRIDownRefusesBinds(t *testing.T) {
	r := newNRIRig(t, fakeNetns{"uid-a": 4026532001}, nil)
	r.up.Store(false)
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	err := r.b.PreStart(t.Context(), res, []string{dev0})
	if err == nil || !strings.Contains(err.Error(), "NRI") {
		t.Fatalf("PreStart without NRI = %v, want a refusal naming NRI", err)
	}
	if r.has("ns/a") || len(r.services(t, "cxi0")) != 0 || len(r.leaser.held) != 0 {
		t.Fatal("a refused bind left a record, a service or a lease")
	}
	if ev := r.events.Of(event.BindRefused); len(ev) != 1 || !strings.Contains(ev[0].What, "NRI") {
		t.Fatalf("events %+v, want the refusal told on the pod", ev)
	}
	r.up.Store(true)
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatalf("PreStart once NRI is back: %v", err)
	}
}

// A pod bound to the configured fallback UID (its namespace not found)
// has no namespace to check: its container gets its environment.
func TestNRIFallbackMemberNeedsNoNamespace(t *testing.T) {
	r := newNRIRig(t, fakeNetns{}, nil)
	uid := uint32(1000)
	r.b.setPolicy(policy{fallback: &cxi.Member{Type: cxi.MemberUID, ID: uid}})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	env, err := r.create(t, sandboxAt("ns", "a", "uid-a", "/var/run/netns/unknown"), "cxi0")
	if err != nil || env["SLINGSHOT_SVC_IDS"] != fmt.Sprint(r.record(t, "ns/a").Services[0].ID) {
		t.Fatalf("CreateContainer = %v, %v; want the environment", env, err)
	}
}

// With NRI the Allocate answer carries no CDI device (the environment is
// set at CreateContainer, not through a spec the runtime's cache may not
// have read), the front end is not ready while NRI is down, and says why.
func TestNewWithNRI(t *testing.T) {
	dir := t.TempDir()
	state := nri.NewState(dir+"/nri.sock", nil)
	r := newRig(t, dir, nil, fakeNetns{})
	c := config.Default()
	f, closeConn, err := New(Config{
		Node: "n1", Settings: c, Engine: r.b.eng, NICs: []sysfs.NIC{{Name: "cxi0", PCIAddress: dev0}},
		DevRoot: "/dev", KubeletDir: dir, FilesDir: dir + "/containers", CDI: r.b.files.cdi,
		Netns: fakeNetns{}, Healthy: func(string) bool { return true }, Registerer: prometheus.NewRegistry(),
		NRI: state, OpenNetns: pathNetns{}.open, Metrics: newTestMetrics(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeConn() })
	resp, err := f.res.Allocate(t.Context(), &pluginapi.ContainerAllocateRequest{DevicesIds: []string{dev0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCdiDevices()) != 0 || resp.GetEnvs()[engine.EnvDevices] != "cxi0" || !slices.ContainsFunc(resp.GetMounts(), func(m *pluginapi.Mount) bool { return m.GetContainerPath() == ContainerDir }) {
		t.Fatalf("Allocate = %+v, want the devices' environment and directory, no CDI device", resp)
	}
	if why := f.NotReady(); !strings.Contains(why, "NRI") {
		t.Fatalf("NotReady = %q, want NRI named", why)
	}
	if _, _, err := New(Config{Node: "n1", Settings: c, Engine: r.b.eng, Netns: fakeNetns{}, Healthy: func(string) bool { return true },
		Registerer: prometheus.NewRegistry(), NRI: state, FilesDir: dir + "/containers"}); err == nil {
		t.Fatal("NRI without a way to open namespaces accepted")
	}
}

package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
	"github.com/slingshot-k8s/slingshot/agent/nri"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

func nriSandbox(pod string, netns string) *api.PodSandbox {
	sb := &api.PodSandbox{Uid: "uid-" + pod, Namespace: "ns", Name: pod, Linux: &api.LinuxPodSandbox{}}
	if netns != "" {
		sb.Linux.Namespaces = []*api.LinuxNamespace{{Type: "network", Path: netns}}
	}
	return sb
}

// TestRefusalEvents: each refusal of the DRA path is told on the pod it
// concerns, with the cause: a Prepare refused (on the pods the claim is
// reserved for), a second pod of a shared claim at its sandbox and at its
// container, a hostNetwork pod, and a late bind that fails when NRI
// reconnects.
func TestRefusalEvents(t *testing.T) {
	ctx := t.Context()
	r := newRig(t)
	ev := &eventtest.Recorder{}
	ready := atomic.Bool{}
	r.cfg.Events = ev
	r.cfg.BindReady = func() error {
		if !ready.Load() {
			return errors.New("not connected to NRI")
		}
		return nil
	}
	r.restart()
	kp := &kubeletPlugin{m: r.m, log: slog.New(slog.DiscardHandler)}
	np := nri.NewPlugin(r.m.NRI(), NewNRIState("x", nil), slog.New(slog.DiscardHandler))

	c := claim("c1", "train-0", "", "cxi0")
	if _, err := kp.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil {
		t.Fatal(err)
	}
	got := ev.Of(event.BindRefused)
	if len(got) != 1 || got[0].Obj != event.Pod("ns", "train-0", "uid-train-0") || !strings.Contains(got[0].What, "ns/claim-c1") || !strings.Contains(got[0].What, "NRI") {
		t.Fatalf("prepare refusal events %+v, want one on ns/train-0 naming the claim and NRI", got)
	}

	ready.Store(true)
	c.Status.ReservedFor = append(c.Status.ReservedFor, c.Status.ReservedFor[0])
	c.Status.ReservedFor[1].Name, c.Status.ReservedFor[1].UID = "train-1", "uid-train-1"
	res, _ := kp.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err := res[c.UID].Err; err != nil {
		t.Fatal(err)
	}
	if err := np.RunPodSandbox(ctx, nriSandbox("train-0", "/var/run/netns/4026531900")); err != nil {
		t.Fatal(err)
	}
	if err := np.RunPodSandbox(ctx, nriSandbox("train-1", "/var/run/netns/4026531901")); err == nil {
		t.Fatal("the second pod of a shared claim was bound")
	}
	shared := ev.Of(event.SharedClaimRefused)
	if len(shared) != 1 || shared[0].Obj != event.Pod("ns", "train-1", "uid-train-1") || !strings.Contains(shared[0].What, "ResourceClaimTemplate") {
		t.Fatalf("shared claim events %+v, want one on ns/train-1 with the fix", shared)
	}
	rec, _ := r.get("c1")
	if _, _, err := np.CreateContainer(ctx, nriSandbox("train-1", "/var/run/netns/4026531901"), &api.Container{Name: "main", Env: r.m.env(rec)}); err == nil {
		t.Fatal("a container of the second pod was admitted")
	}
	if n := len(ev.Of(event.SharedClaimRefused)); n != 2 {
		t.Fatalf("%d shared claim events after the container, want 2", n)
	}
	if _, _, err := np.CreateContainer(ctx, nriSandbox("hostnet", ""), &api.Container{Name: "main", Env: r.m.env(rec)}); err == nil {
		t.Fatal("a hostNetwork container was admitted")
	}
	if hn := ev.Of(event.BindRefused); len(hn) != 2 || hn[1].Obj != event.Pod("ns", "hostnet", "uid-hostnet") {
		t.Fatalf("bind refusals %+v, want the hostNetwork pod's", hn)
	}

	// A late bind at Synchronize whose namespace cannot be opened.
	if _, err := r.m.Prepare(ctx, claim("c2", "late-0", "", "cxi1")); err != nil {
		t.Fatal(err)
	}
	rep := r.m.Synchronize(ctx, []Sandbox{{UID: "uid-late-0", Namespace: "ns", Name: "late-0", NetnsPath: "/var/run/netns/gone"}})
	late := ev.Of(event.LateBindFailed)
	if rep.Failed != 1 || len(late) != 1 || late[0].Obj != event.Pod("ns", "late-0", "uid-late-0") || !strings.Contains(late[0].What, "ns/claim-c2") {
		t.Fatalf("synchronize %+v, late bind events %+v; want one on ns/late-0 naming the claim", rep, late)
	}
}

// failingStatus fails every write, counting them.
type failingStatus struct{ n atomic.Int32 }

func (f *failingStatus) WriteClaimStatus(context.Context, ClaimStatus) error {
	f.n.Add(1)
	return errors.New("the API server is away")
}

// TestClaimStatus: a prepared claim's status.devices gets, for each of its
// devices, the NIC, its service IDs, the VNI and the traffic classes,
// written by server-side apply as the driver; another driver's entry of
// the same claim stays. A status that cannot be written fails nothing:
// Prepare succeeds, the failures are counted, and the writes stop after
// statusAttempts.
func TestClaimStatus(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := newRig(t)
	c := claim("c1", "train-0", "", "cxi0", "cxi1")
	other := resourceapi.AllocatedDeviceStatus{Driver: "gpu.example.com", Pool: "node-a", Device: "gpu0", Data: &runtime.RawExtension{Raw: []byte(`{"x":1}`)}}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{other}
	client := fake.NewClientset(c)
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	q := NewStatusQueue(APIClaimStatus{Client: client, Driver: testDriver}, nil, metrics)
	r.cfg.Status = q
	r.restart()
	done := make(chan struct{})
	go func() { defer close(done); _ = q.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if _, err := r.m.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	rec, _ := r.get("c1")
	var got []DeviceData
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cl, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "claim-c1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = nil
		for _, d := range cl.Status.Devices {
			if d.Driver == other.Driver {
				if d.Device != other.Device || string(d.Data.Raw) != string(other.Data.Raw) {
					return false, fmt.Errorf("another driver's entry changed: %+v", d)
				}
				continue
			}
			if d.Driver != testDriver || d.Pool != "node-a" || d.Data == nil {
				return false, fmt.Errorf("status entry %+v", d)
			}
			var dd DeviceData
			if err := json.Unmarshal(d.Data.Raw, &dd); err != nil {
				return false, err
			}
			if dd.NIC != d.Device {
				return false, fmt.Errorf("entry of %s says NIC %s", d.Device, dd.NIC)
			}
			got = append(got, dd)
		}
		if len(got) == 2 && len(cl.Status.Devices) != 3 {
			return false, fmt.Errorf("another driver's entry is gone: %+v", cl.Status.Devices)
		}
		return len(got) == 2, nil
	})
	if err != nil {
		t.Fatalf("claim status %+v: %v", got, err)
	}
	for _, dd := range got {
		var want []uint32
		for _, s := range rec.Services {
			if s.NIC == dd.NIC {
				want = append(want, s.ID)
			}
		}
		if fmt.Sprint(dd.ServiceIDs) != fmt.Sprint(want) || len(dd.VNIs) != 1 || dd.VNIs[0] != rec.VNI ||
			strings.Join(dd.TrafficClasses, ",") != "LOW_LATENCY,BEST_EFFORT" {
			t.Errorf("device data %+v, want services %v, VNI %d, LOW_LATENCY and BEST_EFFORT", dd, want, rec.VNI)
		}
	}
	// The status is visible as soon as the API server has it, a moment
	// before the queue counts the write: wait for the count, bounded.
	if n, err := waitCount(ctx, metrics.statusWrites.WithLabelValues("ok"), 1); err != nil || n != 1 {
		t.Errorf("%v successful status writes (%v), want 1", n, err)
	}

	// Failing writes: Prepare still succeeds; the queue gives up.
	fw := &failingStatus{}
	q2 := NewStatusQueue(fw, nil, metrics)
	q2.retry = backoff.Policy{Initial: time.Millisecond, Max: time.Millisecond, Factor: 1}
	r.cfg.Status = q2
	r.restart()
	done2 := make(chan struct{})
	go func() { defer close(done2); _ = q2.Run(ctx) }()
	defer func() { cancel(); <-done2 }()
	if _, err := r.m.Prepare(ctx, claim("c2", "train-1", "", "cxi0")); err != nil {
		t.Fatalf("Prepare with a status that cannot be written: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fw.n.Load() >= statusAttempts, nil
	})
	if err != nil {
		t.Fatalf("%d failed writes, want %d", fw.n.Load(), statusAttempts)
	}
	// The writer saw its last call a moment before the queue counted it.
	if n, err := waitCount(ctx, metrics.statusWrites.WithLabelValues("error"), statusAttempts); err != nil {
		t.Errorf("%v failed writes counted (%v), want %d", n, err, statusAttempts)
	}
	q2.mu.Lock()
	left := len(q2.pending)
	q2.mu.Unlock()
	if left != 0 || fw.n.Load() > statusAttempts {
		t.Errorf("%d statuses still queued, %d writes; want none after %d attempts", left, fw.n.Load(), statusAttempts)
	}
}

// waitCount waits, bounded, until c counts at least want, and returns its
// count: what a goroutine counts after the effect a test saw.
func waitCount(ctx context.Context, c prometheus.Collector, want float64) (float64, error) {
	var n float64
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n = testutil.ToFloat64(c)
		return n >= want, nil
	})
	return n, err
}

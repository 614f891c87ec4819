package devplugin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/config"
	"github.com/slingshot-k8s/slingshot/agent/jobpolicy"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
	"github.com/slingshot-k8s/slingshot/cxi"
	"github.com/slingshot-k8s/slingshot/internal/jobreq"
)

// annotatedNetns opens namespaces whose runtime reported the pod's annotations,
// as CRI does (netns.Handle.PodMeta).
type annotatedNetns map[string]annotatedHandle

type annotatedHandle struct {
	ino         uint32
	annotations map[string]string
}

func (f annotatedNetns) Open(_ context.Context, uid string) (nsHandle, error) {
	h, ok := f[uid]
	if !ok {
		return nil, errors.New("no such pod process")
	}
	return &annotatedHandleOpen{annotatedHandle: h}, nil
}

type annotatedHandleOpen struct {
	annotatedHandle
	closed atomic.Bool
}

func (h *annotatedHandleOpen) Inode() uint32 { return h.ino }
func (h *annotatedHandleOpen) Close() error  { h.closed.Store(true); return nil }
func (h *annotatedHandleOpen) PodMeta() (labels, annotations map[string]string) {
	return nil, h.annotations
}

const jobsConfig = `
jobOptions:
  trafficClasses:
    namespaces: {hpc: [BULK_DATA]}
  extraVNIs: [{name: storage, vni: 900, namespaces: [hpc]}]
`

func jobsRig(t *testing.T, netns annotatedNetns) *rig {
	t.Helper()
	c, err := config.Parse([]byte(jobsConfig))
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, t.TempDir(), nil, nil)
	r.b.netns = netns
	r.useConfig(t, c)
	return r
}

func options(s string) map[string]string { return map[string]string{jobreq.Annotation: s} }

// TestPreStartServiceOptions: a pod of an allowed namespace gets the
// classes, reservations and named VNI it asked for, in its services and
// its environment; a restarted container keeps them.
func TestPreStartServiceOptions(t *testing.T) {
	r := jobsRig(t, annotatedNetns{"uid-a": {4026532001, options(`{"trafficClasses":["LOW_LATENCY","BULK_DATA"],"depth":8,"vnis":["storage"]}`)}})
	r.pods.set(pod("hpc", "a", "uid-a", "main", dev0))
	for range 2 { // the second: a container restart
		if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
			t.Fatal(err)
		}
	}
	svcs := r.services(t, "cxi0")
	if len(svcs) != 1 {
		t.Fatalf("services = %+v, want one", svcs)
	}
	s := svcs[0]
	if !slices.Equal(s.VNIs, []uint16{1024, 900}) || s.TCs != cxi.TCLowLatency|cxi.TCBulkData {
		t.Fatalf("service VNIs %v classes %s, want [1024 900] and 0x6", s.VNIs, s.TCs)
	}
	// Slurm's per-rank defaults times 8, TLEs none (no pool taken).
	if s.Limits == nil || s.Limits.LEs.Res != 16*8 || s.Limits.TXQs.Res != 2*8 || s.Limits.PTEs.Res != 6*8 || s.Limits.TLEs != (cxi.Limit{}) {
		t.Fatalf("limits = %+v, want 8 times the per-rank reservation and no TLEs", s.Limits)
	}
	env := r.envFile(t, dev0)
	for _, want := range []string{"SLINGSHOT_VNIS=1024,900\n", "SLINGSHOT_TCS=0x6\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	p, _ := r.store.Get("hpc/a")
	if p.Options == nil || p.Options.Depth != 8 || len(p.Options.ExtraVNIs) != 1 || !slices.Equal(p.Services[0].VNIs, []uint16{1024, 900}) {
		t.Fatalf("record = %+v (options %+v), want the options and both VNIs", p, p.Options)
	}
}

// TestPreStartServiceOptionsRefused: a request outside the policy fails
// the bind with the field named, and leaves no lease, record or service.
func TestPreStartServiceOptionsRefused(t *testing.T) {
	tests := []struct{ name, ns, annotation, want string }{
		{"class not granted", "web", `{"trafficClasses":["LOW_LATENCY","BULK_DATA"]}`, "trafficClasses[1]: BULK_DATA is not allowed"},
		{"named VNI not granted", "web", `{"vnis":["storage"]}`, `vnis[0]: the namespace may not join VNI "storage"`},
		{"grammar", "hpc", `{"depth":"eight"}`, "want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobsRig(t, annotatedNetns{"uid-a": {4026532001, options(tt.annotation)}})
			r.pods.set(pod(tt.ns, "a", "uid-a", "main", dev0))
			err := r.b.PreStart(t.Context(), res, []string{dev0})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), jobreq.Annotation) {
				t.Fatalf("PreStart = %v, want an error naming %s and %q", err, jobreq.Annotation, tt.want)
			}
			if len(r.services(t, "cxi0")) != 0 || len(r.store.IDs(checkpoint.KindPod)) != 0 || len(r.leaser.held) != 0 {
				t.Fatal("a refused request left a service, record or lease")
			}
		})
	}
	// The policy's error matches its sentinel, for callers that sort them.
	r := jobsRig(t, annotatedNetns{"uid-a": {4026532001, options(`{"trafficClasses":["DEDICATED_ACCESS"]}`)}})
	r.pods.set(pod("web", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); !errors.Is(err, jobpolicy.ErrRefused) {
		t.Fatalf("PreStart = %v, want jobpolicy.ErrRefused", err)
	}
}

// TestPreStartTLEPools: a NIC has 4 TLE pools, one the default
// service's; the fourth pod reserving TLEs on it is refused at bind, the
// error naming the NIC and the pools, and leaves nothing behind.
func TestPreStartTLEPools(t *testing.T) {
	netns := annotatedNetns{}
	r := jobsRig(t, netns)
	var ids []string
	for i := range 4 {
		id := "tle-share-" + string(rune('a'+i))
		ids = append(ids, id)
		r.b.devNIC[id] = "cxi0"
		netns["uid-"+id] = annotatedHandle{uint32(4026532100 + i), options(`{"resources":{"TLEs":{"res":8}}}`)}
	}
	var pods []*podwatch.Pod
	for i, id := range ids {
		pods = append(pods, pod("hpc", id, "uid-"+id, "main", id))
		r.pods.set(pods...)
		err := r.b.PreStart(t.Context(), res, []string{id})
		if i < 3 {
			if err != nil {
				t.Fatalf("TLE pod %d: %v", i+1, err)
			}
			continue
		}
		for _, want := range []string{"cxi0", "no TLE pool left", "4 of the NIC's 4 are held"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("fourth TLE pod: %v, want an error containing %q", err, want)
			}
		}
		t.Logf("refused: %v", err)
		if !errors.Is(err, cxi.ErrNoRoom) {
			t.Fatalf("fourth TLE pod: %v, want cxi.ErrNoRoom (refused before the driver)", err)
		}
		if _, ok := r.store.Get("hpc/" + id); ok || len(r.leaser.held) != 3 {
			t.Fatalf("the refused pod left a record or lease: leases %v", r.leaser.held)
		}
	}
	if n := len(r.services(t, "cxi0")); n != 3 {
		t.Fatalf("%d services on cxi0, want 3", n)
	}
}

// Issue 32, defect 4: where the runtime reports nothing of the pod with
// its namespace (found through /proc), its service-options annotation was
// ignored and the pod recorded without its options for good, with no
// event. The annotations are read from the API server then, and a failed
// read fails the bind (the kubelet retries) rather than record the pod
// without what it asked.
func TestOptionsReadFromTheAPIServerWhereTheRuntimeTellsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		read    AnnotationReader
		wantTCs string // "": the bind fails
	}{
		{"read", func(_ context.Context, ns, name, uid string) (map[string]string, error) {
			if ns != "hpc" || name != "a" || uid != "uid-a" {
				return nil, errors.New("asked for another pod")
			}
			return options(`{"trafficClasses":["BULK_DATA"]}`), nil
		}, cxi.TrafficClasses(1 << 2).String()},
		{"unreadable", func(context.Context, string, string, string) (map[string]string, error) {
			return nil, errors.New("the API server is unreachable")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := jobsRig(t, nil)
			r.b.netns = fakeNetns{"uid-a": 4026532001} // found through /proc: no annotations
			r.b.annotations = tc.read
			r.pods.set(pod("hpc", "a", "uid-a", "main", dev0))
			err := r.b.PreStart(t.Context(), res, []string{dev0})
			if tc.wantTCs == "" {
				if err == nil || !strings.Contains(err.Error(), "could not be read") {
					t.Fatalf("PreStart with unreadable annotations: %v, want it refused", err)
				}
				if r.has("hpc/a") || len(r.leaser.held) != 0 {
					t.Fatal("a refused bind left a record or a lease")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rec := r.record(t, "hpc/a")
			if rec.Options == nil || cxi.TrafficClasses(rec.Options.TCs).String() != tc.wantTCs {
				t.Fatalf("recorded options %+v, want traffic classes %s", rec.Options, tc.wantTCs)
			}
		})
	}
}

package devplugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/podwatch"
)

var (
	kpodA = kubeletPod{"ns", "a", "uid-a", "main", []string{dev0}}
	kpodB = kubeletPod{"ns", "b", "uid-b", "main", []string{dev1}}
	netAB = fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002}
)

// bindAB admits pods a and b at k and binds them.
func bindAB(t *testing.T, r *rig, k *fakeKubelet) {
	t.Helper()
	for _, p := range []kubeletPod{kpodA, kpodB} {
		k.admit(p)
		if err := r.b.PreStart(t.Context(), res, p.ids); err != nil {
			t.Fatal(err)
		}
	}
}

// pollAndSweep is one poll of the pod watch followed by a cleanup sweep.
func pollAndSweep(t *testing.T, r *rig, w *podwatch.Watcher) {
	t.Helper()
	_, _ = w.Refresh(t.Context())
	var wg sync.WaitGroup
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
}

// svcIDs lists the IDs of a NIC's services.
func (r *rig) svcIDs(t *testing.T, nicName string) []uint32 {
	t.Helper()
	var ids []uint32
	for _, s := range r.services(t, nicName) {
		ids = append(ids, s.ID)
	}
	return ids
}

// kept fails unless pods a and b still have their records, services, env
// files and leases, with the services they had.
func (r *rig) kept(t *testing.T, step string, cxi0, cxi1 []uint32) {
	t.Helper()
	if got := r.svcIDs(t, "cxi0"); !slices.Equal(got, cxi0) {
		t.Fatalf("%s: cxi0 services %v, want %v", step, got, cxi0)
	}
	if got := r.svcIDs(t, "cxi1"); !slices.Equal(got, cxi1) {
		t.Fatalf("%s: cxi1 services %v, want %v", step, got, cxi1)
	}
	n := len(r.store.IDs(checkpoint.KindPod))
	r.leaser.mu.Lock()
	released := slices.Clone(r.leaser.released)
	r.leaser.mu.Unlock()
	if n != 2 || len(released) != 0 {
		t.Fatalf("%s: %d pod records, released %v; want both pods kept", step, n, released)
	}
	for _, id := range []string{dev0, dev1} {
		r.envFile(t, id)
	}
}

// The sequence seen on a real node: right after a kubelet restart,
// PodResources lists no pods for about a second while the kubelet's
// device checkpoint still holds every allocation, unchanged. Nothing may
// be cleaned up then, nor once the List is refilled; a pod that really
// goes is cleaned up once the kubelet, nudged, has rewritten its
// checkpoint without it. (On the old rule, "absent from one List", the
// first poll after the restart destroyed both pods' services.)
func TestItem3KubeletRestartKeepsRunningPods(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, netAB)
	k := newFakeKubelet(t)
	w := r.useWatcher(k, nil)
	bindAB(t, r, k)
	cxi0, cxi1 := r.svcIDs(t, "cxi0"), r.svcIDs(t, "cxi1")
	pollAndSweep(t, r, w)
	r.kept(t, "bound", cxi0, cxi1)

	k.restart()
	before, err := os.ReadFile(k.checkpointPath())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		pollAndSweep(t, r, w)
		r.kept(t, "kubelet restarted: List empty", cxi0, cxi1)
	}
	if after, _ := os.ReadFile(k.checkpointPath()); !bytes.Equal(before, after) {
		t.Fatalf("the kubelet checkpoint changed while its sources were not ready:\n%s\n%s", before, after)
	}

	k.sourcesReady()
	pollAndSweep(t, r, w)
	r.kept(t, "List refilled", cxi0, cxi1)

	k.remove(kpodA.uid)
	pollAndSweep(t, r, w)
	r.kept(t, "pod a left the List, the checkpoint still names it", cxi0, cxi1)
	pollAndSweep(t, r, w) // reads the checkpoint the nudge made the kubelet write
	if got := r.svcIDs(t, "cxi0"); len(got) != 0 {
		t.Fatalf("pod a's services remain: %v", got)
	}
	if got := r.svcIDs(t, "cxi1"); !slices.Equal(got, cxi1) {
		t.Fatalf("pod b's services %v, want %v", got, cxi1)
	}
	if !slices.Equal(r.leaser.released, []string{"ns/a"}) || !r.has("ns/b") || r.has("ns/a") {
		t.Fatalf("released %v, records %v: want only pod a cleaned up", r.leaser.released, r.store.IDs(checkpoint.KindPod))
	}
}

// A failed List and an unreadable checkpoint prove nothing.
func TestItem3FailedReadsDestroyNothing(t *testing.T) {
	tests := []struct {
		name string
		// after pods a and b are bound and have left the kubelet
		breakRead func(t *testing.T, k *fakeKubelet)
		fresh     bool // a new watcher, as after an agent restart
	}{
		{name: "List fails, no List has succeeded, no checkpoint file", fresh: true, breakRead: func(t *testing.T, k *fakeKubelet) {
			k.setListErr(status.Error(codes.Unavailable, "kubelet down"))
			if err := os.Remove(k.checkpointPath()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "checkpoint unparsable", breakRead: func(t *testing.T, k *fakeKubelet) {
			if err := os.WriteFile(k.checkpointPath(), []byte(`{"Data":`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "checkpoint unreadable", breakRead: func(t *testing.T, k *fakeKubelet) {
			if err := os.Remove(k.checkpointPath()); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(k.checkpointPath(), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, t.TempDir(), nil, netAB)
			k := newFakeKubelet(t)
			w := r.useWatcher(k, nil)
			bindAB(t, r, k)
			cxi0, cxi1 := r.svcIDs(t, "cxi0"), r.svcIDs(t, "cxi1")
			k.remove(kpodA.uid)
			k.remove(kpodB.uid)
			tt.breakRead(t, k)
			if tt.fresh {
				w = r.useWatcher(k, nil)
			}
			for range 3 {
				pollAndSweep(t, r, w)
				r.kept(t, tt.name, cxi0, cxi1)
			}
		})
	}
}

// At agent start, the reconcile keeps every pod the kubelet may still
// hold: with an empty List (a kubelet restarting at the same time) while
// its checkpoint names the pods, with a failed List, with an unreadable
// checkpoint. Pods neither names are cleaned up.
func TestItem3ReconcileKeepsPodsTheKubeletHolds(t *testing.T) {
	tests := []struct {
		name      string
		kubelet   func(t *testing.T, k *fakeKubelet)
		wantClean int
	}{
		{name: "kubelet restarting: List empty, checkpoint names the pods", kubelet: func(_ *testing.T, k *fakeKubelet) { k.restart() }},
		{name: "List fails", kubelet: func(_ *testing.T, k *fakeKubelet) {
			k.setListErr(status.Error(codes.Unavailable, "kubelet down"))
		}},
		{name: "List empty, checkpoint unreadable", kubelet: func(t *testing.T, k *fakeKubelet) {
			k.restart()
			if err := os.WriteFile(k.checkpointPath(), []byte("not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "both pods gone from the List and the checkpoint", wantClean: 2, kubelet: func(t *testing.T, k *fakeKubelet) {
			k.remove(kpodA.uid)
			k.remove(kpodB.uid)
			if _, err := k.List(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			k.nudge(res)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			leaser := &fakeLeaser{held: map[string]uint16{}}
			r := newRig(t, dir, leaser, netAB)
			k := newFakeKubelet(t)
			r.useWatcher(k, nil)
			bindAB(t, r, k)
			tt.kubelet(t, k)

			r2 := newRig(t, dir, leaser, netAB) // the agent restarts
			r2.useWatcher(k, nil)
			rep, err := r2.b.Reconcile(t.Context(), ReconcileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.CleanedPods != tt.wantClean || rep.Kept != 2-tt.wantClean || rep.Destroyed != 0 {
				t.Fatalf("report %+v, want %d pods cleaned up and the others kept", rep, tt.wantClean)
			}
			if n := len(r2.services(t, "cxi0")) + len(r2.services(t, "cxi1")); n != 2-tt.wantClean {
				t.Fatalf("%d services left, want %d", n, 2-tt.wantClean)
			}
		})
	}
}

// The kubelet hands a freed device to the next pod at once, and the
// per-container directory and CDI spec are named by the devices: the gone
// pod's cleanup must leave what the next pod's PreStart published there.
// (The old cleanup removed them: the next pod's container found an empty
// directory, a restart of it no CDI spec, and a PreStart racing the
// cleanup failed to rename its env file.)
func TestItem4CleanupLeavesTheNextHoldersFiles(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001, "uid-b": 4026532002})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	r.pods.set(pod("ns", "b", "uid-b", "main", dev0)) // a exited; b got its device
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	r.b.sweep(t.Context(), &wg)
	wg.Wait()
	if r.has("ns/a") || !r.has("ns/b") {
		t.Fatalf("records %v, want only ns/b", r.store.IDs(checkpoint.KindPod))
	}
	svc := r.record(t, "ns/b").Services[0].ID
	if env := r.envFile(t, dev0); !strings.Contains(env, fmt.Sprintf("SLINGSHOT_SVC_IDS=%d\n", svc)) {
		t.Fatalf("env file does not name pod b's service %d:\n%s", svc, env)
	}
	if specs, _ := os.ReadDir(filepath.Join(r.dir, "cdi")); len(specs) != 1 {
		t.Fatalf("%d CDI specs, want pod b's", len(specs))
	}
}

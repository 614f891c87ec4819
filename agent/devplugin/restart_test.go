package devplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/agent/engine"
	"github.com/slingshot-k8s/slingshot/agent/event"
	"github.com/slingshot-k8s/slingshot/agent/event/eventtest"
	"github.com/slingshot-k8s/slingshot/cxi"
)

// admitsOnlyCurrent fails t where a service recorded for a pod admits a
// namespace other than the pod's current one (cur, by pod UID): the
// service may be unbound, or bound to that namespace, nothing else.
func admitsOnlyCurrent(t *testing.T, r *rig, step string, cur fakeNetns) {
	t.Helper()
	owner := map[string]string{} // "nic/id" → pod UID
	for _, p := range r.store.Holders(checkpoint.KindPod) {
		for _, s := range p.Services {
			owner[fmt.Sprintf("%s/%d", s.NIC, s.ID)] = p.UID
		}
	}
	for _, nic := range []string{"cxi0", "cxi1"} {
		for _, svc := range r.services(t, nic) {
			uid, ok := owner[fmt.Sprintf("%s/%d", nic, svc.ID)]
			if !ok {
				if len(svc.Members) > 0 {
					t.Fatalf("%s: service %d on %s admits %v and no pod records it", step, svc.ID, nic, svc.Members)
				}
				continue
			}
			if !engine.Unbound(svc) && !engine.Admits(svc, cur[uid]) {
				t.Fatalf("%s: service %d on %s of pod %s is enabled=%v admitting %v; its pod's namespace is now %d",
					step, svc.ID, nic, uid, svc.Enabled, svc.Members, cur[uid])
			}
		}
	}
}

// Issue 32, defect 1: at start, the device plugin re-created a live pod's
// lost services enabled for the inode recorded before the restart, and
// kept the others, before checking the pod's namespace; where the
// sandboxes had been made again while the agent was down, the kernel could
// have handed that inode to another pod's new namespace, which the
// services then admitted. Now a service is trusted only once its pod's
// current namespace is found and is the recorded one; otherwise it is
// made unbound, and the pod's next container start binds it to the
// namespace it has then.
func TestRestartNeverAdmitsAnotherPodsNamespace(t *testing.T) {
	const (
		inoA  = 4026532001 // pod a's namespace before the restart
		inoB  = 4026532002 // pod b's
		inoA2 = 4026532010 // a's sandbox made again
	)
	before := fakeNetns{"uid-a": inoA, "uid-b": inoB}
	for _, tc := range []struct {
		name string
		// after is the pods' namespaces once the agent is back.
		after fakeNetns
		// wiped: the driver lost every service while the agent was down
		// (a driver reload).
		wiped bool
		// unbound: the pods whose services must be unbound at start.
		unbound []string
	}{
		{name: "sandboxes kept", after: before},
		{name: "sandboxes kept, driver reloaded", after: before, wiped: true},
		// b's new namespace got a's old inode, as the kernel hands out the
		// lowest free one.
		{name: "sandboxes made again", after: fakeNetns{"uid-a": inoA2, "uid-b": inoA}, unbound: []string{"uid-a", "uid-b"}},
		{name: "sandboxes made again, driver reloaded", after: fakeNetns{"uid-a": inoA2, "uid-b": inoA}, wiped: true, unbound: []string{"uid-a", "uid-b"}},
		// The runtime does not answer for b: doubt unbinds, never trusts.
		{name: "b's namespace not found", after: fakeNetns{"uid-a": inoA}, unbound: []string{"uid-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			leaser := &fakeLeaser{held: map[string]uint16{}}
			r := newRig(t, dir, leaser, before)
			podA, podB := pod("ns", "a", "uid-a", "main", dev0), pod("ns", "b", "uid-b", "main", dev1)
			r.pods.set(podA, podB)
			for _, id := range []string{dev0, dev1} {
				if err := r.b.PreStart(t.Context(), res, []string{id}); err != nil {
					t.Fatal(err)
				}
			}
			admitsOnlyCurrent(t, r, "bound", before)
			if tc.wiped {
				for _, nic := range []string{"cxi0", "cxi1"} {
					for _, svc := range r.services(t, nic) {
						if err := fabricOf(r).Destroy(t.Context(), nic, svc.ID); err != nil {
							t.Fatal(err)
						}
					}
				}
			}

			// The agent is back: a new binder on the same record and driver.
			r2 := newRig(t, dir, leaser, tc.after)
			r2.pods.set(podA, podB)
			rep, err := r2.b.Reconcile(t.Context(), ReconcileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			admitsOnlyCurrent(t, r2, "after the start-up reconcile", tc.after)
			if rep.Unbound != len(tc.unbound) {
				t.Fatalf("report %+v: %d unbound, want %d", rep, rep.Unbound, len(tc.unbound))
			}
			for _, uid := range tc.unbound {
				key := map[string]string{"uid-a": "ns/a", "uid-b": "ns/b"}[uid]
				rec := r2.record(t, key)
				if rec.Netns != 0 || len(rec.Services) != 1 {
					t.Fatalf("pod %s recorded with netns %d and services %v, want unbound with one service", key, rec.Netns, rec.Services)
				}
				if r2.b.eng.Namespaces().Held(key) != 0 {
					t.Fatalf("pod %s: a namespace is held for services that admit nobody", key)
				}
				if !slices.ContainsFunc(r2.events.Of(event.ServicesUnbound), func(e eventtest.Event) bool { return e.Obj.UID == uid }) {
					t.Fatalf("no %s event on pod %s; events: %v", event.ServicesUnbound, key, r2.events.All())
				}
			}
			for key, uid := range map[string]string{"ns/a": "uid-a", "ns/b": "uid-b"} {
				if !slices.Contains(tc.unbound, uid) && r2.b.eng.Namespaces().Held(key) != tc.after[uid] {
					t.Fatalf("pod %s: namespace %d held, want its verified one %d", key, r2.b.eng.Namespaces().Held(key), tc.after[uid])
				}
			}

			// The pods' containers start again (a sandbox made again
			// restarts them): each binds to its namespace as it is now.
			for _, id := range []string{dev0, dev1} {
				if err := r2.b.PreStart(t.Context(), res, []string{id}); err != nil && tc.after["uid-b"] != 0 {
					t.Fatal(err)
				}
			}
			admitsOnlyCurrent(t, r2, "after the containers started again", tc.after)
			for key, uid := range map[string]string{"ns/a": "uid-a", "ns/b": "uid-b"} {
				ino := tc.after[uid]
				if ino == 0 {
					continue
				}
				rec := r2.record(t, key)
				for _, s := range rec.Services {
					svc, err := fabricOf(r2).Get(t.Context(), s.NIC, s.ID)
					if err != nil || !engine.Admits(svc, ino) {
						t.Fatalf("pod %s's service %d on %s after its container started: %+v %v, want bound to %d", key, s.ID, s.NIC, svc, err, ino)
					}
				}
				if env := r2.envFile(t, map[string]string{"ns/a": dev0, "ns/b": dev1}[key]); !strings.Contains(env, fmt.Sprintf("SLINGSHOT_SVC_IDS=%d\n", rec.Services[0].ID)) {
					t.Fatalf("pod %s's env file does not name its service %d:\n%s", key, rec.Services[0].ID, env)
				}
			}
		})
	}
}

// Issue 32, defect 2: stuck services and checkpoint write errors were
// counted only by the device plugin's cleanup and its saves; the engine
// and the store count them now, whichever front end asked.
func TestEngineCountsWhateverTheFrontEnd(t *testing.T) {
	r := newRig(t, t.TempDir(), nil, fakeNetns{"uid-a": 4026532001})
	r.pods.set(pod("ns", "a", "uid-a", "main", dev0))
	if err := r.b.PreStart(t.Context(), res, []string{dev0}); err != nil {
		t.Fatal(err)
	}
	id := r.record(t, "ns/a").Services[0].ID
	if err := r.sims["cxi0"].SetInUse(id, 1); err != nil {
		t.Fatal(err)
	}
	stuck := testutil.ToFloat64(r.em.Stuck)
	if err := fabricOf(r).Destroy(t.Context(), "cxi0", id); err == nil {
		t.Fatal("destroying a service in use succeeded")
	}
	if got := testutil.ToFloat64(r.em.Stuck); got != stuck+1 {
		t.Fatalf("stuck services %v after a destroy that stayed busy, want %v", got, stuck+1)
	}
	if _, err := fabricOf(r).Create(t.Context(), "cxi0", cxi.ServiceSpec{TCs: cxi.DefaultTrafficClasses}); err == nil {
		t.Fatal("a service without a VNI was made")
	}
	if got := testutil.ToFloat64(r.em.ServiceErrors.WithLabelValues("cxi0", "create")); got != 1 {
		t.Fatalf("create errors on cxi0 = %v, want 1", got)
	}
}

// fabricOf is a Fabric over r's NICs counting into the engine's metrics,
// as the engine's: for a test to drive the driver as the engine does.
func fabricOf(r *rig) *engine.Fabric {
	return engine.NewFabric(r.drvs, r.engineMetrics(), nil, nil)
}

// crashingDriver stands for an agent killed at its driver call: the call
// does not return, and nothing after it in the request runs.
type crashingDriver struct{ engine.Driver }

type crash struct{}

func (crashingDriver) CreateUnbound(context.Context, cxi.ServiceSpec) (cxi.Service, error) {
	panic(crash{})
}

// A pod's record becomes durable with the bind's save, not before it (one
// disk flush per pod start fewer): an agent killed between its services'
// creation and that save leaves on the driver only services admitting
// nobody, which the start-up reconcile destroys, and no record; the
// container's next start binds the pod as new, with the same job lease.
func TestCrashBeforeTheBindsSaveLeavesNothingUsable(t *testing.T) {
	dir := t.TempDir()
	leaser := &fakeLeaser{held: map[string]uint16{}}
	netns := fakeNetns{"uid-a": 4026532001}
	r := newRig(t, dir, leaser, netns)
	podA := pod("ns", "a", "uid-a", "main", dev0, dev1)
	r.pods.set(podA)
	// cxi0's service is made, then the agent dies making cxi1's.
	r.drvs["cxi1"] = crashingDriver{r.drvs["cxi1"]}
	r.useLeaser(t, leaser)
	func() {
		defer func() {
			if _, ok := recover().(crash); !ok {
				t.Fatal("the agent did not die at cxi1's create")
			}
		}()
		_ = r.b.PreStart(t.Context(), res, []string{dev0, dev1})
	}()
	if made := r.services(t, "cxi0"); len(made) != 1 || !engine.Unbound(made[0]) {
		t.Fatalf("before the restart, cxi0 has %+v, want one unbound service", made)
	}

	r2 := newRig(t, dir, leaser, netns)
	r2.pods.set(podA)
	if _, ok := r2.store.Get("ns/a"); ok {
		t.Fatal("the pod's record was durable before its bind")
	}
	rep, err := r2.b.Reconcile(t.Context(), ReconcileOptions{ManagedLo: 1024, ManagedHi: 65535})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Destroyed != 1 {
		t.Fatalf("reconcile %+v: want the unbound service destroyed", rep)
	}
	admitsOnlyCurrent(t, r2, "after the start-up reconcile", netns)
	if err := r2.b.PreStart(t.Context(), res, []string{dev0, dev1}); err != nil {
		t.Fatal(err)
	}
	rec := r2.record(t, "ns/a")
	if rec.VNI != leaser.held["ns/a"] || len(rec.Services) != 2 || rec.Netns != netns["uid-a"] {
		t.Fatalf("after the container's next start: %+v; want VNI %d, 2 services, netns %d", rec, leaser.held["ns/a"], netns["uid-a"])
	}
	admitsOnlyCurrent(t, r2, "after the container's next start", netns)
}

package dra

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/internal/draclaim"
)

// groupClaim is a PodGroup's claim of the fabric's VNI device, reserved
// for PodGroup group.
func groupClaim(uid, group string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "group-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "vni", Driver: testDriver, Pool: draclaim.FabricPool, Device: draclaim.VNIDevice}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: group, UID: "pg-" + types.UID(group)}},
		},
	}
}

// groupOf is a ManagerConfig.GroupClaim that answers from a map of pod
// names to their group claims, and counts its calls.
type groupOf struct {
	mu     sync.Mutex
	claims map[string]*resourceapi.ResourceClaim
	err    error
	calls  int
}

func (g *groupOf) of(_ context.Context, pod PodRef, _ string) (*resourceapi.ResourceClaim, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	return g.claims[pod.Name], g.err
}

// TestGroupClaimVNIOnEveryPod: the NIC claims of a PodGroup's pods carry
// the VNI of the group's claim, whatever job each pod's name says, and a
// pod outside the group, or a claim naming its own scope, does not; the
// group claim itself holds nothing on the node.
func TestGroupClaimVNIOnEveryPod(t *testing.T) {
	r := newRig(t)
	group := groupClaim("g-1", "train")
	lookup := &groupOf{claims: map[string]*resourceapi.ResourceClaim{"alpha-0": group, "beta-0": group}}
	r.cfg.GroupClaim = lookup.of
	r.restart()
	ctx := t.Context()

	devs, err := r.m.Prepare(ctx, group)
	if err != nil || len(devs) != 0 {
		t.Fatalf("prepare the group claim: %v, %v; want nothing to hand the containers", devs, err)
	}
	if _, ok := r.get("g-1"); ok || len(r.services("cxi0"))+len(r.services("cxi1")) != 0 || lookup.calls != 0 {
		t.Fatalf("the group claim left a record or services, or read a pod")
	}
	vnis := map[string]uint16{}
	for uid, c := range map[string]*resourceapi.ResourceClaim{
		"a": claim("a", "alpha-0", "", "cxi0"),
		"b": claim("b", "beta-0", "", "cxi1"),
		"c": claim("c", "gamma-0", "", "cxi0"),
		"d": claim("d", "alpha-0", `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","vni":"pod"}`, "cxi1"),
	} {
		if _, err := r.m.Prepare(ctx, c); err != nil {
			t.Fatalf("prepare %s: %v", uid, err)
		}
		rec, _ := r.get(uid)
		vnis[uid] = rec.VNI
	}
	if vnis["a"] == 0 || vnis["a"] != vnis["b"] {
		t.Errorf("the group's pods alpha-0 and beta-0 have VNIs %d and %d: want the group claim's one", vnis["a"], vnis["b"])
	}
	if rec, _ := r.get("a"); rec.LeaseKey != "job/ns/g-1" {
		t.Errorf("alpha-0's lease %q: want the group claim's, job/ns/g-1", rec.LeaseKey)
	}
	if vnis["c"] == vnis["a"] || vnis["d"] == vnis["a"] {
		t.Errorf("VNIs %v: gamma-0 (no group) and alpha-0's claim with vni: pod must not carry the group's", vnis)
	}
	if lookup.calls != 3 {
		t.Errorf("%d group lookups: want one per NIC claim that leaves its VNI to the job (3)", lookup.calls)
	}
	// A second Prepare of a prepared claim reads nothing.
	if _, err := r.m.Prepare(ctx, claim("a", "alpha-0", "", "cxi0")); err != nil || lookup.calls != 3 {
		t.Fatalf("prepare again: %v, %d lookups", err, lookup.calls)
	}
	if err := r.m.Unprepare(ctx, "g-1"); err != nil {
		t.Fatalf("unprepare the group claim: %v", err)
	}
	if !r.leaser.holds("job/ns/g-1") {
		t.Fatal("unpreparing the group claim dropped the VNI its pods' NIC claims still hold")
	}
	for _, uid := range []string{"a", "b"} {
		if err := r.m.Unprepare(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if r.leaser.holds("job/ns/g-1") {
		t.Fatal("the node still holds the group's VNI after its pods' claims are gone")
	}
}

// TestGroupClaimRefusals: a claim of the VNI device where the agent serves
// no PodGroup claims, or mixed with NICs, is refused; a failed lookup
// fails the NIC claim before anything is leased or made.
func TestGroupClaimRefusals(t *testing.T) {
	ctx := t.Context()
	r := newRig(t)
	if _, err := r.m.Prepare(ctx, groupClaim("g-1", "train")); err == nil || !strings.Contains(err.Error(), "--dra-podgroup-claims") {
		t.Fatalf("group claim without --dra-podgroup-claims: %v, want it refused, naming the flag", err)
	}
	lookup := &groupOf{err: errors.New("API server unreachable")}
	r.cfg.GroupClaim = lookup.of
	r.restart()
	mixed := groupClaim("g-2", "train")
	mixed.Status.Allocation.Devices.Results = append(mixed.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: testDriver, Pool: "node-a", Device: "cxi0"})
	if _, err := r.m.Prepare(ctx, mixed); err == nil || !strings.Contains(err.Error(), "claim of their own") {
		t.Fatalf("VNI device and a NIC in one claim: %v, want it refused", err)
	}
	if _, err := r.m.Prepare(ctx, claim("a", "alpha-0", "", "cxi0")); err == nil || !strings.Contains(err.Error(), "API server unreachable") {
		t.Fatalf("NIC claim whose group could not be read: %v, want the lookup's error", err)
	}
	if _, ok := r.get("a"); ok || r.leaser.acquires != 0 || len(r.services("cxi0")) != 0 {
		t.Fatalf("a refused claim left a record, a lease (%d acquires) or services", r.leaser.acquires)
	}
}

// TestAPIGroupClaims reads the pod and its claims as the API server holds
// them: the group claim of its PodGroup, by name or through the pod's
// claim statuses; none for a pod outside a group or whose claims are
// another group's; an error for two, for a claim not allocated yet, or
// for a pod that is another now.
func TestAPIGroupClaims(t *testing.T) {
	pod := func(name, group string, claims ...corev1.PodResourceClaim) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{ResourceClaims: claims}}
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	byName := func(ref, name string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: ref, ResourceClaimName: ptr.To(name)}
	}
	g1, g2, other := groupClaim("g-1", "train"), groupClaim("g-2", "train"), groupClaim("g-3", "eval")
	nic := claim("n", "w-0", "", "cxi0")
	templated := pod("w-4", "train", corev1.PodResourceClaim{Name: "vni", ResourceClaimTemplateName: ptr.To("t")}, byName("nic", nic.Name))
	templated.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "vni", ResourceClaimName: ptr.To(g1.Name)}}
	pending := groupClaim("g-4", "train")
	pending.Status.Allocation = nil
	objs := []runtime.Object{g1, g2, other, nic, templated, pending,
		pod("w-5", "train", byName("vni", pending.Name)),
		pod("w-0", "train", byName("vni", g1.Name), byName("nic", nic.Name)),
		pod("w-1", "", byName("vni", g1.Name), byName("nic", nic.Name)),
		pod("w-2", "train", byName("vni", g1.Name), byName("vni2", g2.Name)),
		pod("w-3", "train", byName("vni", other.Name)),
	}
	a := APIGroupClaims{APIClaims: APIClaims{Client: fake.NewClientset(objs...)}, Driver: testDriver}
	for _, tt := range []struct {
		pod, uid, want, wantErr string
	}{
		{pod: "w-0", want: "group-g-1"},
		{pod: "w-4", want: "group-g-1"},
		{pod: "w-1"},
		{pod: "w-3"},
		{pod: "w-2", wantErr: "holds 2 claims"},
		{pod: "w-5", wantErr: "not allocated yet"},
		{pod: "w-0", uid: "uid-old", wantErr: "another pod now"},
		{pod: "gone", wantErr: "read pod"},
	} {
		uid := tt.uid
		if uid == "" {
			uid = "uid-" + tt.pod
		}
		got, err := a.Of(t.Context(), PodRef{Namespace: "ns", Name: tt.pod, UID: uid}, nic.Name)
		var name string
		if got != nil {
			name = got.Name
		}
		if name != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("pod %s (uid %s): %q, %v; want %q, error containing %q", tt.pod, uid, name, err, tt.want, tt.wantErr)
		}
	}
}

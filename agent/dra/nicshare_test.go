package dra

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
)

// sharedClaim is claim, each device a share of a NIC other claims share
// too (consumable capacity): the scheduler names the share.
func sharedClaim(uid, pod string, nics ...string) *resourceapi.ResourceClaim {
	c := claim(uid, pod, "", nics...)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].ShareID = ptr.To(types.UID("share-" + uid))
	}
	return c
}

// Issue 34: claims of different jobs allocated shares of one NIC each get
// a service of their own on it, with their own VNI, admitting their own
// pod's namespace alone; each device and status entry names its share
// (the API keys both by it), also after a restart; one claim's unprepare
// leaves the other's service as it was.
func TestClaimsShareANIC(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	claims := map[string]*resourceapi.ResourceClaim{
		"a": sharedClaim("a", "train-0", "cxi0"),
		"b": sharedClaim("b", "infer-0", "cxi0"),
	}
	inodes := map[string]uint32{"a": 4026531900, "b": 4026531901}
	pods := map[string]string{"a": "train-0", "b": "infer-0"}
	for uid, c := range claims {
		devs, err := r.m.Prepare(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 1 || devs[0].ShareID == nil || *devs[0].ShareID != types.UID("share-"+uid) {
			t.Fatalf("claim %s: devices %+v, want cxi0 with its share", uid, devs)
		}
		if err := r.m.Bind(ctx, sandbox(pods[uid], inodes[uid])); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string) {
		t.Helper()
		svcs := r.services("cxi0")
		if len(svcs) != 2 {
			t.Fatalf("%s: cxi0 has %d services, want one per claim: %+v", step, len(svcs), svcs)
		}
		vnis := map[uint16]bool{}
		for uid := range claims {
			rec, ok := r.get(uid)
			if !ok || len(rec.Services) != 1 || len(rec.Results) != 1 || rec.Results[0].ShareID != "share-"+uid {
				t.Fatalf("%s: claim %s recorded as %+v", step, uid, rec)
			}
			vnis[rec.VNI] = true
			i := slices.IndexFunc(svcs, func(s sim.Service) bool { return s.Desc.SvcID == rec.Services[0].ID })
			if i < 0 || !svcs[i].Desc.Enable || !slices.Equal(svcs[i].NetNS, []uint32{inodes[uid]}) ||
				int(svcs[i].Desc.NumVldVNIs) != 1 || svcs[i].Desc.VNIs[0] != rec.VNI {
				t.Fatalf("%s: claim %s's service %d: %+v; want enabled, VNI %d, admitting %d alone", step, uid, rec.Services[0].ID, svcs, rec.VNI, inodes[uid])
			}
			st := r.m.statusOf(rec)
			if len(st.Devices) != 1 || st.Devices[0].ShareID != "share-"+uid || st.Devices[0].Device != "cxi0" {
				t.Fatalf("%s: claim %s's status %+v, want cxi0's entry with its share", step, uid, st)
			}
		}
		if len(vnis) != 2 {
			t.Fatalf("%s: the claims of two jobs carry VNIs %v, want one each", step, vnis)
		}
	}
	check("bound")
	r.restart()
	if _, err := r.m.Reconcile(ctx, 1024, 65535); err != nil {
		t.Fatal(err)
	}
	check("after a restart")

	if err := r.m.Unprepare(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	svcs := r.services("cxi0")
	rec, _ := r.get("b")
	if len(svcs) != 1 || svcs[0].Desc.SvcID != rec.Services[0].ID || !svcs[0].Desc.Enable || !slices.Equal(svcs[0].NetNS, []uint32{inodes["b"]}) {
		t.Fatalf("after claim a's unprepare, cxi0 has %+v; want claim b's service alone, as it was", svcs)
	}
}

// Claims sharing a NIC lose their services in a driver reload while the
// agent is down; their containers, started meanwhile, name the old IDs. At
// start the services are made again in the order of those IDs, so that
// the driver's lowest-free allocation gives each claim the ID it had (made
// in the claims' own order, the IDs would have changed hands).
func TestDriverReloadRemakesSharedServicesWithTheirIDs(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	inodes := map[string]uint32{"a": 4026531900, "b": 4026531901, "c": 4026531902}
	// Prepared in the reverse of the claims' order: c has the lowest ID.
	for _, uid := range []string{"c", "b", "a"} {
		if _, err := r.m.Prepare(ctx, sharedClaim(uid, "job"+uid+"-0", "cxi0")); err != nil {
			t.Fatal(err)
		}
		if err := r.m.Bind(ctx, sandbox("job"+uid+"-0", inodes[uid])); err != nil {
			t.Fatal(err)
		}
	}
	had := map[string]uint32{}
	for uid := range inodes {
		rec, _ := r.get(uid)
		had[uid] = rec.Services[0].ID
	}
	if !(had["c"] < had["b"] && had["b"] < had["a"]) {
		t.Fatalf("service IDs %v: want c's lowest, then b's, then a's", had)
	}
	for _, s := range r.services("cxi0") {
		if err := r.drv["cxi0"].Destroy(ctx, s.Desc.SvcID); err != nil {
			t.Fatal(err)
		}
	}
	r.restart()
	if _, err := r.m.Reconcile(ctx, 1024, 65535); err != nil {
		t.Fatal(err)
	}
	for uid, id := range had {
		rec, _ := r.get(uid)
		if len(rec.Services) != 1 || rec.Services[0].ID != id {
			t.Errorf("claim %s: services %+v after the reload, want ID %d again", uid, rec.Services, id)
		}
	}
}

// TestSharedClaimReservingLEsCountsAPool: on a NIC shared by claims, a
// claim whose services reserve LEs (its serviceOptions' depth) takes one
// of the NIC's LE pools, so its request must count one (lePools) for the
// scheduler to know; without it Prepare refuses, naming the capacity to
// ask for, holding nothing. With it, or on a NIC the claim has alone, or
// without a reservation, it is prepared.
func TestSharedClaimReservingLEsCountsAPool(t *testing.T) {
	const opts = `{"apiVersion":"slingshot.hpe.com/v1alpha1","kind":"CXIClaimConfig","serviceOptions":{"depth":4}}`
	consumed := func(c *resourceapi.ResourceClaim, pools int64) *resourceapi.ResourceClaim {
		for i := range c.Status.Allocation.Devices.Results {
			c.Status.Allocation.Devices.Results[i].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				CapacityServices: *resource.NewQuantity(1, resource.DecimalSI),
				CapacityLEPools:  *resource.NewQuantity(pools, resource.DecimalSI),
			}
		}
		return c
	}
	shared := func(uid, config string) *resourceapi.ResourceClaim {
		c := claim(uid, "train-"+uid, config, "cxi0")
		c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-" + uid))
		return c
	}
	cases := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		refused bool
	}{
		{"shared, reserving LEs, no pool counted", consumed(shared("a", opts), 0), true},
		{"shared, reserving LEs, no capacity named", shared("b", opts), true},
		{"shared, reserving LEs, a pool counted", consumed(shared("c", opts), 1), false},
		{"shared, reserving nothing", consumed(shared("d", ""), 0), false},
		{"the NIC alone, reserving LEs", claim("e", "train-e", opts, "cxi0"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			_, err := r.m.Prepare(t.Context(), tc.claim)
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), `lePools: "1"`) || !strings.Contains(err.Error(), "cxi0") {
				t.Fatalf("Prepare = %v, want a refusal naming cxi0 and the lePools request", err)
			}
			if len(r.services("cxi0")) != 0 || len(r.m.Records()) != 0 || len(r.leaser.held) != 0 {
				t.Fatal("a refused claim left a service, a record or a lease")
			}
		})
	}
}

package kubectlplugin

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/agent/ipam"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// netipEqual compares the reports' addresses by value.
var netipEqual = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// Fixtures: a Job's pod on n1 served by the device plugin, a DRA pod,
// and what their agent reports.

func fixturePod(ns, name, uid, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}}
}

var agentPod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "slingshot", Name: "slingshot-agent-x7"}, Spec: corev1.PodSpec{NodeName: "n1"}}

func fixtureReport() *inspect.Report {
	return &inspect.Report{
		Node: "n1", Ready: true,
		NICs: []inspect.NIC{{Name: "cxi0", Healthy: true, Link: true}, {Name: "cxi1", Healthy: false, Reason: "link down"}},
		Services: []inspect.Service{
			{NIC: "cxi0", ID: 1, Enabled: true, System: true, VNIs: []uint16{1, 10}, Members: []string{"all"}},
			{NIC: "cxi0", ID: 12, Enabled: true, VNIs: []uint16{1042, 900}, Members: []string{"netns=4026532000"}, Pod: "team-a/allreduce-0",
				TCs: "0x6", Reserved: map[string]int{"TXQs": 16, "LEs": 128, "PTEs": 48}},
			{NIC: "cxi1", ID: 13, Enabled: true, VNIs: []uint16{1042}, Members: []string{"netns=4026532000"}, Pod: "team-a/allreduce-0"},
			{NIC: "cxi0", ID: 14, Enabled: true, VNIs: []uint16{2050}, Members: []string{"netns=4026532111"}, Pod: "team-b/solo"},
			{NIC: "cxi1", ID: 20, Enabled: true, VNIs: []uint16{1043}, Members: []string{"netns=4026532222"}},
			// Another tool's service: no pod's, no claim's.
			{NIC: "cxi1", ID: 30, Enabled: true, VNIs: []uint16{3000}, Members: []string{"uid=1000"}},
		},
		Pods: []inspect.Pod{
			{Namespace: "team-a", Name: "allreduce-0", UID: "uid-a", VNI: 1042, Scope: "job", NICs: []string{"cxi0", "cxi1"}, State: "running", HSN: "hsn0 10.150.3.7/16 on hsn0",
				Collectives: "k8s-uid-job"},
			{Namespace: "team-b", Name: "solo", UID: "uid-b", VNI: 2050, Scope: "pod", NICs: []string{"cxi0"}, State: "running"},
		},
		Claims: []inspect.Claim{
			{Namespace: "team-c", Name: "ring-0-nic", UID: "claim-uid", VNI: 1043, Scope: "claim", Devices: []string{"cxi1"},
				Services: []string{"cxi1:20@4026532222"}, BoundPod: "uid-c", State: "bound"},
		},
		PodVNIPool: &inspect.Pool{Free: 60, Total: 64},
		Reservations: []inspect.Reservation{
			{NIC: "cxi0", Resource: "LE pools", Max: 16, Reserved: 2, Free: 14},
			{NIC: "cxi0", Resource: "TLE pools", Max: 4, Reserved: 2, Free: 2},
			{NIC: "cxi1", Resource: "TLE pools", Max: 4, Reserved: 1, Free: 3},
		},
		IPAM: &ipam.Snapshot{
			Pools: []ipam.PoolInfo{{Name: "hsn", Slices: []ipam.SliceInfo{{Index: 3, Used: 1, Fill: 0.0625}}}},
			Allocations: []ipam.Allocation{
				{Owner: "pod/uid-a/hsn0", Pool: "hsn", Address: netip.MustParseAddr("10.150.3.7"), Pod: "team-a/allreduce-0"},
			},
		},
	}
}

func fixtureLeases() []Lease {
	return []Lease{
		{Namespace: "slingshot", Name: "vni-job-uid", VNI: 1042, Scope: "job", Key: "job/team-a/job-uid", Nodes: []string{"n1", "n2"}, Created: t0.Add(-5 * time.Minute),
			Owner: Owner{APIVersion: "batch/v1", Kind: "Job", Namespace: "team-a", Name: "allreduce", UID: "job-uid"}},
		{Namespace: "slingshot", Name: "vni-claim-team-c.ring-0-nic", VNI: 1043, Scope: "claim", Key: "claim/team-c/ring-0-nic", Nodes: []string{"n1"}, Created: t0.Add(-3 * time.Hour),
			Owner: Owner{Kind: "ResourceClaim", Namespace: "team-c", Name: "ring-0-nic"}},
	}
}

func TestBuildPod(t *testing.T) {
	leases := fixtureLeases()
	claimName := "ring-0-nic"
	draPod := fixturePod("team-c", "ring-0", "uid-c", "n1")
	draPod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "nic", ResourceClaimName: &claimName}}
	rc := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: claimName},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "nic", Driver: "cxi.hpe.com", Pool: "n1", Device: "cxi1"}}}}}}
	rep := fixtureReport()
	tests := []struct {
		name    string
		pod     *corev1.Pod
		leases  []Lease
		claims  []resourcev1.ResourceClaim
		want    *PodView
		wantErr error
	}{{
		name: "device-plugin pod of a Job: its services, hsn and the Job's lease", pod: fixturePod("team-a", "allreduce-0", "uid-a", "n1"), leases: leases,
		want: &PodView{Namespace: "team-a", Name: "allreduce-0", UID: "uid-a", Node: "n1", Agent: "slingshot/slingshot-agent-x7",
			VNI: 1042, Scope: "job", State: "running", NICs: []string{"cxi0", "cxi1"}, HSN: "hsn0 10.150.3.7/16 on hsn0",
			Addresses: []string{"10.150.3.7 (hsn)"}, Collectives: "k8s-uid-job", Services: rep.Services[1:3], Lease: &leases[0]},
	}, {
		name: "pod-scoped VNI from the node's pool: no lease, and a note says why", pod: fixturePod("team-b", "solo", "uid-b", "n1"), leases: leases,
		want: &PodView{Namespace: "team-b", Name: "solo", UID: "uid-b", Node: "n1", Agent: "slingshot/slingshot-agent-x7",
			VNI: 2050, Scope: "pod", State: "running", NICs: []string{"cxi0"}, Services: rep.Services[3:4],
			Notes: []string{"no VNILease holds VNI 2050: a pod-scoped VNI from the node's pool has none"}},
	}, {
		name: "leases unread (nil): no lease and no note from the join", pod: fixturePod("team-b", "solo", "uid-b", "n1"),
		want: &PodView{Namespace: "team-b", Name: "solo", UID: "uid-b", Node: "n1", Agent: "slingshot/slingshot-agent-x7",
			VNI: 2050, Scope: "pod", State: "running", NICs: []string{"cxi0"}, Services: rep.Services[3:4]},
	}, {
		name: "DRA pod: its bound claim's services, the ResourceClaim's devices, the claim's lease", pod: draPod, leases: leases,
		claims: []resourcev1.ResourceClaim{rc},
		want: &PodView{Namespace: "team-c", Name: "ring-0", UID: "uid-c", Node: "n1", Agent: "slingshot/slingshot-agent-x7",
			VNI: 1043, Scope: "claim", State: "bound", NICs: []string{"cxi1"}, Services: rep.Services[4:5], Claims: rep.Claims,
			ResourceClaims: []ResourceClaim{{Name: claimName, Devices: []string{"cxi.hpe.com/n1/cxi1"}}}, Lease: &leases[1]},
	}, {
		name: "a new pod of an old one's name (another UID) is not the one the agent serves", pod: fixturePod("team-a", "allreduce-0", "uid-new", "n1"),
		leases: leases, wantErr: ErrNotServed,
	}, {
		name: "pod without a NIC", pod: fixturePod("team-a", "web", "uid-w", "n1"), leases: leases, wantErr: ErrNotServed,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BuildPod(tt.pod, agentPod, rep, tt.leases, tt.claims)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("BuildPod: %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, netipEqual); diff != "" {
				t.Errorf("BuildPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildVNIsOrders(t *testing.T) {
	ls := fixtureLeases()
	ls[0], ls[1] = ls[1], ls[0]
	v := BuildVNIs(ls, []Quarantine{{VNI: 1041}, {VNI: 1030}})
	var got []uint16
	for _, l := range v.Leases {
		got = append(got, l.VNI)
	}
	for _, q := range v.Quarantine {
		got = append(got, q.VNI)
	}
	if diff := cmp.Diff([]uint16{1042, 1043, 1030, 1041}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if e := BuildVNIs(nil, nil); e.Leases == nil || e.Quarantine == nil {
		t.Errorf("empty view has nil lists (JSON null, not []): %+v", e)
	}
}

func TestBuildNodes(t *testing.T) {
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
			{Key: "hpe.com/fabric", Value: "down", Effect: corev1.TaintEffectNoExecute}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "login"}},
	}
	a2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "slingshot", Name: "slingshot-agent-b"}}
	got := BuildNodes(nodes, map[string]*corev1.Pod{"n1": agentPod, "n2": a2},
		map[string]*inspect.Report{"n1": fixtureReport()}, map[string]error{"n2": errors.New("exec refused")})
	want := []NodeView{
		{Name: "login", Taints: []string{}},
		{Name: "n1", Taints: []string{}, Agent: "slingshot/slingshot-agent-x7", Report: fixtureReport()},
		{Name: "n2", Taints: []string{"node.kubernetes.io/unschedulable:NoSchedule", "hpe.com/fabric=down:NoExecute"},
			Agent: "slingshot/slingshot-agent-b", Error: "exec refused"},
	}
	if diff := cmp.Diff(want, got, netipEqual); diff != "" {
		t.Errorf("BuildNodes (-want +got):\n%s", diff)
	}
}

func TestWriteTables(t *testing.T) {
	rep := fixtureReport()
	pod, err := BuildPod(fixturePod("team-a", "allreduce-0", "uid-a", "n1"), agentPod, rep, fixtureLeases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// n1's agent is older than 0.2.0 (its report has no version), n3's is 0.2.0.
	rep3 := fixtureReport()
	rep3.Node, rep3.Version = "n3", "0.2.0"
	nodes := BuildNodes([]corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "hpe.com/fabric", Value: "down", Effect: corev1.TaintEffectNoSchedule}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "login"}}, {ObjectMeta: metav1.ObjectMeta{Name: "n3"}}},
		map[string]*corev1.Pod{"n1": agentPod, "n2": agentPod, "n3": agentPod}, map[string]*inspect.Report{"n1": rep, "n3": rep3},
		map[string]error{"n2": errors.New("exec in agent: permission denied")})
	many := fixtureLeases()[:1]
	many[0].Nodes = []string{"n1", "n2", "n3", "n4", "n5"}
	tests := []struct {
		name  string
		write func(*strings.Builder) error
		want  string
	}{{
		name: "vnis", write: func(b *strings.Builder) error {
			ls := append(fixtureLeases(), Lease{VNI: 1050, Scope: "job", Key: "job/team-d/x", OwnerGone: true, Owner: Owner{Kind: "Job", Namespace: "team-d", Name: "done"}, Created: t0.Add(-72 * time.Hour)},
				Lease{VNI: 1051, Scope: "pod", Key: "pod/team-e/p", Owner: Owner{Kind: "Pod", Namespace: "team-e", Name: "p"}, Created: t0.Add(-30 * time.Second)})
			return WriteVNIs(b, BuildVNIs(ls, []Quarantine{{VNI: 1041, Released: t0.Add(-90 * time.Second)}, {VNI: 1040}}), t0)
		},
		want: `VNI   SCOPE  OWNER                            NODES     AGE  STATUS
1042  job    Job team-a/allreduce             2: n1,n2  5m   held
1043  claim  ResourceClaim team-c/ring-0-nic  1: n1     3h   held
1050  job    Job team-d/done                  0         3d   owner gone, being freed
1051  pod    Pod team-e/p                     0         30s  leased, no node holds it

QUARANTINED VNI  RELEASED
1040             -
1041             90s ago
`,
	}, {
		name: "vnis: many nodes are cut, none at all is said", write: func(b *strings.Builder) error {
			if err := WriteVNIs(b, BuildVNIs(many, nil), t0); err != nil {
				return err
			}
			return WriteVNIs(b, BuildVNIs(nil, nil), t0)
		},
		want: `VNI   SCOPE  OWNER                 NODES           AGE  STATUS
1042  job    Job team-a/allreduce  5: n1,n2,n3,+2  5m   held
No VNI leases.
`,
	}, {
		name: "pod", write: func(b *strings.Builder) error { return WritePod(b, pod) },
		want: `Pod:          team-a/allreduce-0
UID:          uid-a
Node:         n1 (agent slingshot/slingshot-agent-x7)
VNI:          1042 (job scope)
Lease:        vni-job-uid, owner Job team-a/allreduce, held by 2: n1,n2
State:        running
NICs:         cxi0,cxi1
HSN:          hsn0 10.150.3.7/16 on hsn0
Addresses:    10.150.3.7 (hsn)
Collectives:  k8s-uid-job (hardware collectives at the fabric manager)

NIC   SVC  ENABLED  VNIS      TCS  RESERVED                 MEMBERS
cxi0  12   yes      1042,900  0x6  LEs=128,PTEs=48,TXQs=16  netns=4026532000
cxi1  13   yes      1042      -    -                        netns=4026532000
`,
	}, {
		name: "nodes", write: func(b *strings.Builder) error { return WriteNodes(b, nodes) },
		want: `NODE   AGENT  VERSION  NICS         UNHEALTHY         SERVICES  PODS  TLE POOLS  POD VNI POOL  IP POOLS          TAINTS
login  none   -        -            -                 -         -     -          -             -                 -
n1     ready  -        1/2 healthy  cxi1 (link down)  4         3     5/8 free   60/64 free    hsn:1 in 1 slice  -
n2     error  -        -            -                 -         -     -          -             -                 hpe.com/fabric=down:NoSchedule
n3     ready  0.2.0    1/2 healthy  cxi1 (link down)  4         3     5/8 free   60/64 free    hsn:1 in 1 slice  -
error: node n2: exec in agent: permission denied
`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := tt.write(&b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/claimstatus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// claimCRD is the hand-written VNIClaim CRD, as the chart installs it;
// the test main installs only the store's.
const claimCRD = "../../../deploy/crds"

var (
	claimCRDOnce sync.Once
	claimCRDErr  error
)

func installClaimCRD(t *testing.T) {
	t.Helper()
	claimCRDOnce.Do(func() {
		claimCRDErr = srv.InstallCRDs(context.WithoutCancel(t.Context()), os.DirFS(claimCRD), "slingshot.hpe.com_vniclaims.yaml")
	})
	if claimCRDErr != nil {
		t.Fatalf("install the VNIClaim CRD: %v", claimCRDErr)
	}
}

// TestVNIClaimStatusShowsVNI runs slingshot-controller, with the chart's
// ServiceAccount and RBAC alone, over each store: a pod naming
// claim:ring acquires through it, and `kubectl get vniclaim` (the server's
// Table, and the kubectl binary where one is on PATH or in $KUBECTL)
// shows the claim's VNI. The status is then cleared (as a user, or a
// controller older than the status, would leave it) and the controller
// killed; the next one (a restart over sqlite, the standby's takeover
// over kube) writes it again at its load, with no acquire. Every status
// write is the controller's field manager's, and the controller logs no
// forbidden request.
func TestVNIClaimStatusShowsVNI(t *testing.T) {
	installClaimCRD(t)
	for _, storeKind := range []string{"sqlite", "kube"} {
		t.Run(storeKind, func(t *testing.T) {
			ctx := t.Context()
			ns := newNamespace(t, "claim-"+storeKind)
			applyControllerRBAC(t, ns)
			user := "system:serviceaccount:" + ns + ":" + controllerName
			waitAccess(t, user, authzv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: "slingshot.hpe.com",
				Resource: "vniclaims", Subresource: "status", Name: "ring"}, true)
			tok, err := kubeClient(t).CoreV1().ServiceAccounts(ns).CreateToken(ctx, controllerName, &authnv1.TokenRequest{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			kc := writeTokenKubeconfig(t, tok.Status.Token)
			var logs lockedBuffer
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("controller logs:\n%s", logs.String())
				}
			})
			db := filepath.Join(t.TempDir(), "controller.db")
			start := func(id string) *replica {
				if storeKind == "kube" {
					return startReplica(t, ns, id, kc, &logs)
				}
				return startController(t, id, kc, &logs, "--store", "sqlite", "--db", db)
			}

			claims := dynamicClient(t).Resource(claimstatus.Resource).Namespace(ns)
			if _, err := claims.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "slingshot.hpe.com/v1alpha1", "kind": "VNIClaim",
				"metadata": map[string]any{"name": "ring"}, "spec": map[string]any{}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod := claimPod(t, ns, "ring")

			reps := []*replica{start(storeKind + "-r0")}
			if storeKind == "kube" {
				reps = append(reps, start(storeKind+"-r1")) // a warm standby
			}
			var vni uint32
			var leader *replica
			eventually(t, time.Minute, "an acquire naming claim:ring", func() (bool, string) {
				var last string
				for _, r := range reps {
					l, err := r.client.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{
						Pod: &apiv1.PodRef{Namespace: ns, Name: pod.Name, Uid: string(pod.UID)}, Node: "node-a"})
					switch {
					case status.Code(err) == codes.Unavailable:
						last = r.id + ": " + err.Error() // loading, or the other replica leads
					case err != nil:
						t.Fatalf("acquire from %s: %v", r.id, err)
					default:
						vni, leader = l.GetVni(), r
						return vni != 0, fmt.Sprint(l)
					}
				}
				return false, last
			})
			t.Logf("%s leased VNI %d for claim:ring", leader.id, vni)
			want := fmt.Sprint(vni)
			waitClaimColumn(t, ns, "ring", want)
			checkKubectl(t, ns, "ring", want)
			checkStatusManager(t, ns, "ring")

			// The claim's status is cleared (the leader does not watch
			// claims: it writes on its own changes and at loads), then the
			// leader goes (SIGKILL). The next controller writes it again
			// at its load: the standby taking over (kube), or a restart
			// over the same db (sqlite).
			if _, err := claims.Patch(ctx, "ring", types.MergePatchType, []byte(`{"status":{"vni":null}}`), metav1.PatchOptions{}, "status"); err != nil {
				t.Fatal(err)
			}
			waitClaimColumn(t, ns, "ring", "<none>")
			_ = leader.cmd.Process.Kill()
			leader.exited <- <-leader.exited // kept for the cleanup's wait
			if storeKind == "sqlite" {
				start(storeKind + "-r1")
			}
			waitClaimColumn(t, ns, "ring", want)
			checkKubectl(t, ns, "ring", want)
			checkStatusManager(t, ns, "ring")
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(strings.ToLower(line), "forbidden") {
					t.Errorf("log: %s", line)
				}
			}
		})
	}
}

// claimPod creates a pod (pending forever) that names VNIClaim claim.
func claimPod(t *testing.T, ns, claim string) *corev1.Pod {
	t.Helper()
	cs := kubeClient(t)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	p, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Annotations: map[string]string{"slingshot.hpe.com/vni": "claim:" + claim}},
		Spec:       corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// claimColumn returns the VNI column of claim's row in the Table the API
// server gives kubectl get vniclaim, "<none>" when empty, as kubectl
// prints it.
func claimColumn(t *testing.T, ns, claim string) (string, error) {
	tbl := getTable(t, ns, "vniclaims", "")
	col := -1
	for i, c := range tbl.ColumnDefinitions {
		if c.Name == "VNI" {
			col = i
		}
	}
	if col < 0 {
		return "", fmt.Errorf("no VNI column in %+v", tbl.ColumnDefinitions)
	}
	for _, r := range tbl.Rows {
		if r.Cells[0] != claim {
			continue
		}
		if r.Cells[col] == nil {
			return "<none>", nil
		}
		b, _ := json.Marshal(r.Cells[col])
		return string(b), nil
	}
	return "", fmt.Errorf("no row %s", claim)
}

func waitClaimColumn(t *testing.T, ns, claim, want string) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("kubectl get vniclaim %s shows VNI %s", claim, want), func() (bool, string) {
		got, err := claimColumn(t, ns, claim)
		if err != nil {
			return false, err.Error()
		}
		return got == want, "VNI " + got
	})
}

// checkKubectl runs the real kubectl, where there is one, and checks that
// its row for claim shows vni.
func checkKubectl(t *testing.T, ns, claim, vni string) {
	t.Helper()
	bin := os.Getenv("KUBECTL")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("kubectl"); err != nil {
			t.Logf("no kubectl on PATH or in $KUBECTL; the server's Table alone was checked")
			return
		}
	}
	out, err := exec.CommandContext(t.Context(), bin, "--kubeconfig", writeKubeconfig(t), "get", "vniclaim", "-n", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get vniclaim: %v\n%s", err, out)
	}
	t.Logf("kubectl get vniclaim -n %s:\n%s", ns, out)
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == claim {
			if f[1] != vni {
				t.Errorf("kubectl shows VNI %s for %s, want %s", f[1], claim, vni)
			}
			return
		}
	}
	t.Errorf("kubectl shows no row %s", claim)
}

// checkStatusManager checks that the status's VNI is the controller's
// field manager's, written through the status subresource.
func checkStatusManager(t *testing.T, ns, claim string) {
	t.Helper()
	u, err := dynamicClient(t).Resource(claimstatus.Resource).Namespace(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range u.GetManagedFields() {
		if m.Manager == claimstatus.FieldManager && m.Subresource == "status" && m.FieldsV1 != nil &&
			strings.Contains(string(m.FieldsV1.Raw), `"f:vni"`) {
			return
		}
	}
	b, _ := json.Marshal(u.GetManagedFields())
	t.Errorf("status.vni of %s is not %s's (status subresource): %s", claim, claimstatus.FieldManager, b)
}

package e2edra

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// TestDRABindFailingOnSecondNIC (issue 24, defect 3): a claim of both
// NICs is prepared (a disabled, memberless service on each), then its
// bind at the pod's sandbox fails on the second NIC: the simulated cxi1
// refuses SVC_ENABLE with ENOSPC, as the real driver does when its RMU
// VNI-list entries have run out, after cxi0's service already admits the
// sandbox's namespace and is enabled. The sandbox is refused with the
// agent's event naming cxi1 and the error; no service of the claim admits any
// namespace or is enabled (cxi0's goes back to unbound); and once cxi1
// enables again the kubelet's retry binds the claim and the pod runs.
func TestDRABindFailingOnSecondNIC(t *testing.T) {
	needDRA(t)
	env.BindFailOnSecondNIC(t, env.TestNamespace(t, "dra-bindfail"), cluster.BindFailure{
		// DRA makes the services at prepare and binds them at the sandbox.
		Op: uapi.OpSvcEnable,
		Job: func(t *testing.T, ns string) *batchv1.Job {
			createTemplate2(t, ns, "two")
			job := cluster.ClaimJob(cluster.BindFailJob, 1, "two")
			env.WithServiceCheck(&job.Spec.Template.Spec)
			return job
		},
		Unbound: claimUnbound,
		CheckRunning: func(t *testing.T, ctx context.Context, pod corev1.Pod) {
			t.Helper()
			checkBound(t, viewDRAPod(t, ctx, pod))
		},
	})
}

// claimUnbound is TestDRABindFailingOnSecondNIC's condition while the
// kubelet retries the sandbox: each try binds cxi0 before cxi1 refuses,
// and between tries every service of the claim must be unbound.
// Unbinding makes a service again (the driver cannot drop a member), so
// the claim is read afresh each time.
func claimUnbound(t *testing.T, ctx context.Context, ns string, _ corev1.Pod) (string, func(context.Context) (string, bool)) {
	t.Helper()
	claim := preparedClaim(t, ctx, ns)
	if len(claim.Services) != 2 || !strings.HasPrefix(claim.Services[0], "cxi0:") || !strings.HasPrefix(claim.Services[1], "cxi1:") {
		// The bind goes in the claim's device order; with cxi1 first the
		// fault would hit the first NIC and prove nothing of the second.
		t.Fatalf("claim %s/%s has services %v, want cxi0's then cxi1's", claim.Namespace, claim.Name, claim.Services)
	}
	return "the claim's services are not all unbound", func(ctx context.Context) (string, bool) {
		return claimServicesUnbound(t, preparedClaim(t, ctx, ns))
	}
}

// createTemplate2 makes a ResourceClaimTemplate of both NICs, with a
// pod-scoped VNI, in ns.
func createTemplate2(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := env.Node.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), cluster.NICClaimTemplate(name, 2, "pod"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// preparedClaim waits for the agent to report the one claim of ns
// prepared, with its services.
func preparedClaim(t *testing.T, ctx context.Context, ns string) inspect.Claim {
	t.Helper()
	var found inspect.Claim
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, err := env.Inspect(ctx)
		if err != nil {
			return false, nil
		}
		for _, c := range rep.Claims {
			if c.Namespace == ns && len(c.Services) > 0 {
				found = c
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the agent reports no prepared claim in %s: %v\n%s", ns, err, env.Describe(ctx))
	}
	return found
}

// claimServicesUnbound reads the claim's services as the driver holds
// them and reports whether each is disabled and admits nobody, with a
// description of them.
func claimServicesUnbound(t *testing.T, c inspect.Claim) (string, bool) {
	t.Helper()
	var b strings.Builder
	unbound := true
	for _, ref := range c.Services {
		nic, rest, _ := strings.Cut(ref, ":")
		idText, _, _ := strings.Cut(rest, "@")
		id, err := strconv.ParseUint(idText, 10, 32)
		if err != nil {
			t.Fatalf("claim service %q: %v", ref, err)
		}
		svcs, err := simstate.Read(env.SimStateDir, nic)
		if err != nil {
			t.Fatal(err)
		}
		var svc *simstate.Service
		for i := range svcs {
			if svcs[i].ID == uint32(id) {
				svc = &svcs[i]
			}
		}
		switch {
		case svc == nil:
			fmt.Fprintf(&b, "%s/%d: gone; ", nic, id)
			unbound = false
		case svc.Enabled || svc.Open || len(svc.NetNS) > 0 || len(svc.UIDs) > 0 || len(svc.GIDs) > 0:
			fmt.Fprintf(&b, "%s/%d: enabled=%v netns=%v; ", nic, id, svc.Enabled, svc.NetNS)
			unbound = false
		default:
			fmt.Fprintf(&b, "%s/%d: unbound; ", nic, id)
		}
	}
	return b.String(), unbound
}

package e2edra

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
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
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-bindfail")
	createTemplate2(t, ns, "two")
	clear, err := env.InjectFault("cxi1", sim.Fault{Op: uapi.OpSvcEnable, Errno: syscall.ENOSPC, Count: -1})
	if err != nil {
		t.Fatal(err)
	}
	cleared := false
	t.Cleanup(func() {
		if !cleared {
			_ = clear()
		}
	})
	job := cluster.ClaimJob("bindfail", 1, "two")
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	env.WithServiceCheck(&job.Spec.Template.Spec)
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	why, err := env.WaitAgentEvent(ctx, ns, "Pod", "", "CXIBindRefused")
	if err != nil {
		t.Fatalf("%v\n%s", err, env.Describe(ctx))
	}
	if !strings.Contains(why, "cxi1") || !strings.Contains(why, syscall.ENOSPC.Error()) || !strings.Contains(why, "What to do") {
		t.Errorf("event %q: want cxi1, %q and what to do", why, syscall.ENOSPC.Error())
	}

	claim := preparedClaim(t, ctx, ns)
	if len(claim.Services) != 2 || !strings.HasPrefix(claim.Services[0], "cxi0:") || !strings.HasPrefix(claim.Services[1], "cxi1:") {
		// The bind goes in the claim's device order; with cxi1 first the
		// fault would hit the first NIC and prove nothing of the second.
		t.Fatalf("claim %s/%s has services %v, want cxi0's then cxi1's", claim.Namespace, claim.Name, claim.Services)
	}
	// The kubelet retries the sandbox meanwhile, and each try binds cxi0
	// before cxi1 refuses: between tries every service must be unbound.
	// Unbinding makes a service again (the driver cannot drop a member),
	// so the claim is read afresh each time.
	var state string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var unbound bool
		state, unbound = claimServicesUnbound(t, preparedClaim(t, ctx, ns))
		return unbound, nil
	})
	if err != nil {
		t.Fatalf("the claim's services are not all unbound after the failed bind: %s\n%s", state, env.Describe(ctx))
	}
	pods, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the job: %d (err %v), want 1", len(pods.Items), err)
	}
	if cluster.Started(&pods.Items[0]) {
		t.Fatalf("the container started although its claim is not bound: %+v", pods.Items[0].Status.ContainerStatuses)
	}

	cleared = true
	if err := clear(); err != nil {
		t.Fatal(err)
	}
	running, err := env.WaitRunning(ctx, ns, "job-name=bindfail", 1)
	if err != nil {
		t.Fatalf("the pod did not start once cxi1 enabled services again: %v\n%s", err, env.Describe(ctx))
	}
	checkBound(t, viewDRAPod(t, ctx, running[0]))
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

package e2edra

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
	"github.com/slingshot-k8s/slingshot/hack/real-node/simstate"
)

// refusalTexts are what the agent's refusal of a hostNetwork pod says
// (any of them), as the kubelet passes the runtime's error on.
var refusalTexts = []string{"hostNetwork", "host network", "no network namespace of its own"}

// TestDRAHostNetworkRefused: a hostNetwork pod with a claim: the agent's
// NRI plugin refuses its sandbox (its only network namespace would be the
// host's, and a service admitting that admits every host process), its
// container never starts, and an event on the pod carries the agent's
// reason. The claim's prepared services stay disabled and admit nobody,
// and deleting the Job cleans them up.
func TestDRAHostNetworkRefused(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-hostnet")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("hostnet", 1, "nic")
	job.Spec.Template.Spec.HostNetwork = true
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodWarning(t, ctx, ns, "", fmt.Sprintf("carries the agent's refusal (%q)", refusalTexts), func(msg string) bool { return containsAny(msg, refusalTexts) })

	list, err := env.Node.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var svcs []simstate.Service
	var specs []string
	var claims []*resourcev1.ResourceClaim
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil && !cs.State.Terminated.StartedAt.IsZero() {
				t.Errorf("pod %s: container started: %+v", p.Name, cs.State)
			}
		}
		cl, err := env.PodClaims(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cl {
			claims = append(claims, c)
			// The services the claim's CDI spec names: prepared, never
			// bound.
			for _, spec := range claimSpecs(t, c) {
				specs = append(specs, spec)
				e, err := cluster.CDIEnv(spec)
				if err != nil {
					t.Fatal(err)
				}
				nics, ids := splitList(e["SLINGSHOT_DEVICES"]), splitList(e["SLINGSHOT_SVC_IDS"])
				for i := range min(len(nics), len(ids)) {
					id, _ := strconv.ParseUint(ids[i], 10, 32)
					s, ok, err := simstate.Find(env.SimStateDir, nics[i], uint32(id))
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						continue
					}
					svcs = append(svcs, s)
					if s.Enabled || s.Open || len(s.NetNS) > 0 || len(s.UIDs) > 0 || len(s.GIDs) > 0 {
						t.Errorf("pod %s: service %s of its claim: enabled=%v open=%v netns=%v uids=%v gids=%v; want disabled, admitting nobody",
							p.Name, svcKey(s.NIC, s.ID), s.Enabled, s.Open, s.NetNS, s.UIDs, s.GIDs)
					}
				}
			}
		}
	}

	if err := env.DeleteJob(ctx, ns, "hostnet"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodsGone(ctx, ns, "e2e-job=hostnet"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitDRACleanedUp(ctx, svcs, specs, claims, 0); err != nil {
		t.Fatal(err)
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

package e2edra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// claimDeviceData is the agent's data in a claim's status.devices entry.
type claimDeviceData struct {
	NIC            string   `json:"nic"`
	ServiceIDs     []uint32 `json:"serviceIDs"`
	VNIs           []uint16 `json:"vnis"`
	TrafficClasses []string `json:"trafficClasses"`
}

// TestDRAClaimStatus: a running pod's claim shows, in its status.devices
// (what `kubectl get resourceclaim -o yaml` prints), an entry of the
// driver for each allocated NIC with the NIC, the service IDs and the VNI
// the pod got: those its environment names.
func TestDRAClaimStatus(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-status")
	createTemplate(t, ns, "nic", "job")
	pods, err := env.RunJob(ctx, ns, cluster.ClaimJob("st", 1, "nic"))
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, pods[0])
	if len(v.Claims) != 1 || len(v.Devices) == 0 {
		t.Fatalf("pod %s: claims %d, devices %v; want one claim with its NICs", v.Key, len(v.Claims), v.Devices)
	}
	c := v.Claims[0]
	var got map[string]claimDeviceData
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cl, err := env.Node.Client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = map[string]claimDeviceData{}
		for _, d := range cl.Status.Devices {
			if d.Driver != cluster.DRADriver || d.Data == nil {
				continue
			}
			var dd claimDeviceData
			if err := json.Unmarshal(d.Data.Raw, &dd); err != nil {
				return false, fmt.Errorf("claim %s device %s: data %s: %w", c.Name, d.Device, d.Data.Raw, err)
			}
			got[d.Device] = dd
		}
		return len(got) == len(v.Devices), nil
	})
	if err != nil {
		t.Fatalf("claim %s/%s status.devices %+v, want an entry for each of %v: %v\n%s", ns, c.Name, got, v.Devices, err, env.Describe(ctx))
	}
	for i, nic := range v.Devices {
		dd, ok := got[nic]
		if !ok {
			t.Errorf("no status entry for NIC %s: %+v", nic, got)
			continue
		}
		if dd.NIC != nic || !slices.Contains(dd.ServiceIDs, v.SvcIDs[i]) || len(dd.VNIs) == 0 || dd.VNIs[0] != v.JobVNI() || len(dd.TrafficClasses) == 0 {
			t.Errorf("status of %s: %+v; want NIC %s, service %d, VNI %d and the traffic classes (the pod's environment: %v)", nic, dd, nic, v.SvcIDs[i], v.JobVNI(), v.Env)
		}
		t.Logf("claim %s/%s, %s: %+v", ns, c.Name, nic, dd)
	}
}

// TestDRABindRefusedEvent: a pod whose sandbox the agent refuses (a
// hostNetwork pod with a claim) has the agent's own event, with its
// reason, the cause and what to do.
func TestDRABindRefusedEvent(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-refused-event")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("refused", 1, "nic")
	job.Spec.Template.Spec.HostNetwork = true
	job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	if _, err := env.Node.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg, err := env.WaitAgentEvent(ctx, ns, "Pod", "", "CXIBindRefused")
	if err != nil {
		t.Fatalf("the hostNetwork pod: %v\n%s", err, env.Describe(ctx))
	}
	t.Logf("event: %s", msg)
	if !containsAny(msg, refusalTexts) || !strings.Contains(msg, "What to do") {
		t.Errorf("event %q: want the cause (%q) and what to do", msg, refusalTexts)
	}
}

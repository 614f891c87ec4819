package e2edra

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/slingshot-k8s/slingshot/hack/real-node/cluster"
)

// TestDRAKubeletLostClaimState (issue 24, defect 7): the kubelet loses
// its claim state (its DRA checkpoint gone) while a claimed pod is
// deleted, so it never asks the agent to unprepare the claim. The agent
// reads the claim from the API server: gone, twice, --dra-lost-claim-grace
// apart; it unprepares it itself, and the job's VNI is not leaked.
func TestDRAKubeletLostClaimState(t *testing.T) {
	needDRA(t)
	ctx := t.Context()
	ns := env.TestNamespace(t, "dra-lost")
	createTemplate(t, ns, "nic", "job")
	job := cluster.ClaimJob("lost", 1, "nic")
	env.WithServiceCheck(&job.Spec.Template.Spec)
	pods, err := env.RunJob(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	v := viewDRAPod(t, ctx, pods[0])
	checkBound(t, v)
	vni := v.JobVNI()
	if holders := vniHolders(t, ctx, vni); len(holders) != 1 {
		t.Fatalf("VNI %d held by %v before, want the node", vni, holders)
	}

	// The kubelet stops and loses its claim state; the pod and its Job go
	// from the API meanwhile (the claim with them).
	if err := env.Node.Kubelet.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.Node.Kubelet.Start()
		}
	})
	state := filepath.Join(env.Node.KubeletDir, "dra_manager_state")
	if err := os.Remove(state); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	bg := metav1.DeletePropagationBackground
	if err := env.Node.Client.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := env.Node.Client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := env.Node.Kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	if err := env.Node.WaitNodeReady(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Two reads grace apart, a pass every grace/5: within 2 graces.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*lostClaimGrace+time.Minute, true, func(ctx context.Context) (bool, error) {
		rep, err := env.Inspect(ctx)
		if err != nil {
			return false, nil
		}
		for _, c := range rep.Claims {
			if c.Namespace == ns {
				return false, nil
			}
		}
		holders, err := env.VNIHolders(ctx, vni)
		return err == nil && len(holders) == 0, nil
	})
	if err != nil {
		t.Fatalf("the forgotten claim's record or VNI hold is still there: %v\n%s", err, env.Describe(ctx))
	}
	t.Logf("claim collected and VNI %d released %v after the kubelet came back (grace %v)", vni, time.Since(start).Round(time.Second), lostClaimGrace)
}

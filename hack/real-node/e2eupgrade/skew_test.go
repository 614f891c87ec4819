package e2eupgrade

import (
	"testing"
)

// TestSkew: the controller and the agent of different releases, on each
// of the controller's stores. The baseline's controller with HEAD's
// agent is what a single `helm upgrade` passes through when the agents
// roll before the controller (held here by pausing the controller's
// rollout); HEAD's controller with the baseline's agent is what
// docs/upgrade.md's rollback passes through (the controller paused while
// the agents go back). In both, a Job's pods run isolated on one VNI,
// and when the Job ends the driver keeps nothing of them and the
// controller frees the VNI.
func TestSkew(t *testing.T) {
	for _, store := range []string{storeSQLite, storeKube} {
		t.Run(store, func(t *testing.T) {
			base, head := env.Baseline, env.Head
			resumeAtEnd(t)
			baseRev := deploy(t, base, store)
			t.Run("BaselineControllerHEADAgent", func(t *testing.T) {
				ctx := t.Context()
				if err := env.PauseController(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := env.Upgrade(ctx, head, storeValues(store)); err != nil {
					t.Fatal(err)
				}
				if err := env.WaitRuns(ctx, head, base); err != nil {
					t.Fatal(err)
				}
				runJob(t)
				if err := env.ResumeController(ctx); err != nil {
					t.Fatal(err)
				}
				if err := env.WaitRuns(ctx, head, head); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("HEADControllerBaselineAgent", func(t *testing.T) {
				ctx := t.Context()
				deploy(t, head, store)
				if err := env.PauseController(ctx); err != nil {
					t.Fatal(err)
				}
				if err := env.Rollback(ctx, baseRev); err != nil {
					t.Fatal(err)
				}
				if err := env.WaitRuns(ctx, base, head); err != nil {
					t.Fatal(err)
				}
				runJob(t)
			})
		})
	}
}

// runJob runs a Job of two pods, checks them isolated on the Job's one
// VNI, which the controller records this node as holding, and ends it:
// nothing of it stays in the driver, and the controller frees its VNI.
func runJob(t *testing.T) {
	t.Helper()
	j := startJob(t, env.TestNamespace(t, "skew"), "s", 2)
	holders(t, j)
	t.Logf("job s: 2 pods on VNI %d", j.vni)
	endJobs(t, j)
}

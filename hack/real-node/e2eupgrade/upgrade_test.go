package e2eupgrade

import (
	"testing"
)

// TestUpgradeRollback: pods of two Jobs run under the baseline's agent
// and controller (sqlite store); the release is upgraded to HEAD as
// docs/upgrade.md says (the CRDs, the controller with the agents held,
// then the agents by a rolling update) and rolled back as it says (the
// controller paused while the agents go back, then resumed). Through
// every step each pod keeps its services (the same IDs in the driver,
// the same members and VNIs), its environment, its env file and its VNI,
// and the controller its hold; after the agents' upgrade and after their
// rollback a new pod of each Job runs on the Job's VNI. When the Jobs
// end, the baseline's agent leaves nothing in the driver and the
// controller frees their VNIs.
func TestUpgradeRollback(t *testing.T) {
	ctx := t.Context()
	base, head := env.Baseline, env.Head
	resumeAtEnd(t)
	baseRev := deploy(t, base, storeSQLite)
	ns := env.TestNamespace(t, "upgrade")
	a, b := startJob(t, ns, "a", 2), startJob(t, ns, "b", 2)
	if a.vni == b.vni {
		t.Fatalf("two Jobs share VNI %d", a.vni)
	}
	holders(t, a, b)
	t.Logf("under %s: job a on VNI %d, job b on VNI %d", base, a.vni, b.vni)

	keeps(t, "the CRDs and the controller upgraded, the agents held", func(t *testing.T) {
		if err := env.ApplyCRDs(ctx, head); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Upgrade(ctx, head, agentsHeld(storeSQLite)); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRuns(ctx, base, head); err != nil {
			t.Fatal(err)
		}
	}, a, b)
	keeps(t, "the agents upgraded (rolling update)", func(t *testing.T) {
		if _, err := env.Upgrade(ctx, head, storeValues(storeSQLite)); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRuns(ctx, head, head); err != nil {
			t.Fatal(err)
		}
	}, a, b)
	a.grow(t)
	b.grow(t)

	keeps(t, "rolled back: the controller paused, the agents back", func(t *testing.T) {
		if err := env.PauseController(ctx); err != nil {
			t.Fatal(err)
		}
		if err := env.Rollback(ctx, baseRev); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRuns(ctx, base, head); err != nil {
			t.Fatal(err)
		}
	}, a, b)
	a.grow(t)
	b.grow(t)
	keeps(t, "rolled back: the controller resumed", func(t *testing.T) {
		if err := env.ResumeController(ctx); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRuns(ctx, base, base); err != nil {
			t.Fatal(err)
		}
	}, a, b)

	endJobs(t, a, b)
}

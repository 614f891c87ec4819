package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
	"github.com/slingshot-k8s/slingshot/cxi/sim"
)

// checkpointName is the agent's checkpoint file in its state directory
// (agent.CheckpointName; see apiDevicePlugin for why not imported). Were
// it renamed, the fault below would miss and the alert's case fail.
const checkpointName = "checkpoint.json"

// The alerts on a failed checkpoint write and on services that cannot be
// destroyed fire from what a DRA-mode agent exports when those faults
// really happen to it, and no alert fires from a healthy one: the real
// agent binary with --api=dra (startAgentNode's stand-ins for the API
// server, the kubelet and the runtime's NRI) and the real controller,
// scraped over HTTP; the series the rules read are loaded, scrape by
// scrape, into the rule tests' storage and the chart's rules evaluated
// over them by Prometheus's rule engine (firing).
//
// Time: sample i of a timeline is taken as the scrape at minute i.
// Between two samples the agent does what one minute of a node in that
// state would do: nothing, or, for a claim whose services stay busy, one
// more NodeUnprepareResources from the kubelet, which retries a failed
// unprepare (how often is the kubelet's choice; what the alert needs of
// the agent is that each round that ends busy is counted, which only the
// agent can show).
//
// The faults:
//   - stuck: a process holds an LNI on the claim's service (the
//     simulated driver's in-use count, as hack/cxi-sim in-use sets it),
//     so that SVC_DESTROY answers EBUSY as the real driver does;
//   - checkpoint: the checkpoint's journal cannot be opened for writing.
//     A read-only state directory is the usual cause on a node, but root
//     (this test may run as root) writes there regardless; a directory in
//     the journal's place refuses every writer, root included.
func TestAlertsFireFromDRAModeFaults(t *testing.T) {
	rgs, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	// The series the rules read: only those are loaded.
	keep := map[string]bool{}
	for _, q := range RuleQueries(rgs) {
		uses, _, err := Uses(q.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			keep[u.Metric] = true
		}
	}
	rules := filepath.Join(root, RulesPath)

	bin := buildBinaries(t)
	dir := shortTempDir(t)
	ctrl := startController(t, bin, filepath.Join(dir, "controller"))
	n := startAgentNode(t, bin, filepath.Join(dir, apiDRA), apiDRA, "n1", ctrl.grpc)
	tg := target{node: n.name, instance: n.metrics, job: "slingshot-agent"}
	fired := []map[string]string{{"node": tg.node, "instance": tg.instance, "job": tg.job}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scrape := func() map[string]float64 {
		t.Helper()
		b, err := n.scrapeText()
		if err != nil {
			t.Fatal(err)
		}
		s, err := sample(b, keep, tg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// counter is the value of a counter without labels in s.
	counter := func(s map[string]float64, name string) float64 {
		t.Helper()
		v, ok := s[selector(name, map[string]string{"node": tg.node, "instance": tg.instance, "job": tg.job})]
		if !ok {
			t.Fatalf("the DRA agent does not export %s", name)
		}
		return v
	}
	// rises scrapes until name's counter is above was: the agent counts
	// before it answers the kubelet, so the first scrape should see it;
	// the deadline bounds a count that never comes.
	rises := func(name string, was float64) map[string]float64 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := scrape()
			if counter(s, name) > was {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stayed at %v", name, was)
			}
			select {
			case <-n.proc.done:
				t.Fatal("the DRA agent exited")
			case <-time.After(20 * time.Millisecond): // the next scrape
			}
		}
	}
	const stuckTotal, checkpointErrors = "slingshot_agent_stuck_services_total", "slingshot_agent_checkpoint_errors_total"

	// Healthy: a claim's whole life, then 40 minutes of scrapes. No
	// alert fires.
	if err := n.claimLife(ctx); err != nil {
		t.Fatal(err)
	}
	var healthy timeline
	for range 40 {
		healthy = append(healthy, scrape())
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			got, err := firing(rules, healthy.series(), 39*time.Minute, r.Alert)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 {
				t.Errorf("healthy DRA agent: %s fires %v", r.Alert, got)
			}
		}
	}
	base := healthy[len(healthy)-1]
	if v := counter(base, stuckTotal) + counter(base, checkpointErrors); v != 0 {
		t.Fatalf("healthy DRA agent: stuck services and checkpoint errors count %v", v)
	}

	// One round ends busy, then the process lets go and the next
	// unprepare destroys the service: the counter rises once, and the
	// alert, which wants round after round, stays quiet.
	c, err := n.newClaim()
	if err == nil {
		err = n.prepare(ctx, c)
	}
	if err == nil {
		err = n.runSandbox(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	hold(t, ctx, n, c, 1)
	if err := n.unprepare(ctx, c); err == nil {
		t.Fatal("unprepare of a claim whose service is in use succeeded")
	}
	once := timeline{}.then(base, 5).then(rises(stuckTotal, 0), 1)
	hold(t, ctx, n, c, 0)
	if err := n.unprepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	freed := scrape()
	if got := counter(freed, stuckTotal); got != 1 {
		t.Fatalf("%s is %v after one stuck round and a destroy, want 1", stuckTotal, got)
	}
	once = once.then(freed, 30)
	got, err := firing(rules, once.series(), 25*time.Minute, "SlingshotServicesStuck")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Errorf("one stuck round, then destroyed: SlingshotServicesStuck fires %v", got)
	}

	// A claim whose service stays in use: every unprepare the kubelet
	// retries ends busy, round after round, and the alert fires.
	c, err = n.newClaim()
	if err == nil {
		err = n.prepare(ctx, c)
	}
	if err == nil {
		err = n.runSandbox(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	hold(t, ctx, n, c, 1)
	was := counter(freed, stuckTotal)
	stuck := timeline{}.then(freed, 5)
	for range 36 {
		if err := n.unprepare(ctx, c); err == nil {
			t.Fatal("unprepare of a claim whose service is in use succeeded")
		}
		s := rises(stuckTotal, was)
		stuck, was = append(stuck, s), counter(s, stuckTotal)
	}
	got, err = firing(rules, stuck.series(), 35*time.Minute, "SlingshotServicesStuck")
	if err != nil {
		t.Fatal(err)
	}
	if !sameAlerts(got, fired) {
		t.Errorf("services stuck round after round: SlingshotServicesStuck fires %v, want %v", got, fired)
	}

	// The checkpoint's journal cannot be written: the next Prepare needs
	// a durable record, fails, and the failed write is counted.
	before := scrape()
	journal := checkpoint.JournalPath(filepath.Join(n.stateDir, checkpointName))
	if err := os.Remove(journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Mkdir(journal, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err = n.newClaim()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.prepare(ctx, c); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("prepare with an unwritable checkpoint: %v, want a checkpoint error", err)
	}
	failed := rises(checkpointErrors, counter(before, checkpointErrors))
	written := timeline{}.then(before, 5).then(failed, 10)
	got, err = firing(rules, written.series(), 8*time.Minute, "SlingshotAgentCheckpointWriteErrors")
	if err != nil {
		t.Fatal(err)
	}
	if !sameAlerts(got, fired) {
		t.Errorf("a failed checkpoint write: SlingshotAgentCheckpointWriteErrors fires %v, want %v", got, fired)
	}
}

// hold sets how many LNIs a process holds on each of claim c's services
// in the simulated driver (0 lets go), as `cxi-sim in-use` does: while
// one does, SVC_DESTROY answers EBUSY.
func hold(t *testing.T, ctx context.Context, n *agentNode, c claim, lnis int) {
	t.Helper()
	svcs, err := n.services(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) == 0 {
		t.Fatalf("the agent reports no service of claim %s", c.Name)
	}
	for nic, ids := range svcs {
		d, err := sim.Open(filepath.Join(n.stateDir, "cxi-sim"), nic, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if err := d.SetInUse(id, lnis); err != nil {
				t.Fatal(fmt.Errorf("service %d on %s: %w", id, nic, err))
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/hooks"
	"github.com/slingshot-k8s/slingshot/internal/backoff"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	stormJobs    = flag.Int("hookstorm.jobs", 600, "parents (batch/v1 Jobs) of TestItem7HookStormLosesAndDuplicatesNothing")
	stormClients = flag.Int("hookstorm.clients", 16, "concurrent Metacontroller-like clients of the hook storm")
)

// stormFinalizer is the finalizer Metacontroller puts on a
// DecoratorController's parents so that /finalize runs before they go.
const stormFinalizer = "metacontroller.k8s.io/decoratorcontroller-slingshot-vni"

// hookCluster is the controller replicas the storm's clients call, as
// Metacontroller calls the controller's Service: whichever replica
// answers. Replicas are started, killed and replaced while clients call.
type hookCluster struct {
	t          *testing.T
	ns, kc     string
	logs       io.Writer
	client     *http.Client
	mu         sync.Mutex
	reps       []*hookReplica
	last       string // id of the replica that answered last
	started    int
	transports atomic.Int64 // calls that failed on the wire or were sent away (429, 5xx)
}

type hookReplica struct {
	*replica
	url string
}

// start runs one more replica (--store kube --leader-elect, hooks on a
// loopback port, the hooks' API-server checks on as they always are with a
// Kubernetes API). Call it from the test's goroutine.
func (c *hookCluster) start() *hookReplica {
	c.t.Helper()
	c.mu.Lock()
	id := fmt.Sprintf("hooks-r%d", c.started)
	c.started++
	c.mu.Unlock()
	r := startReplica(c.t, c.ns, id, c.kc, c.logs, "--hooks-addr=127.0.0.1:0", "--max-leases-per-namespace=0")
	hr := &hookReplica{replica: r, url: "http://" + waitFor(c.t, r.http, time.Minute)}
	c.mu.Lock()
	c.reps = append(c.reps, hr)
	c.mu.Unlock()
	return hr
}

// killLeader SIGKILLs the replica that answered last and forgets it.
func (c *hookCluster) killLeader() string {
	c.t.Helper()
	c.mu.Lock()
	i := slices.IndexFunc(c.reps, func(r *hookReplica) bool { return r.id == c.last })
	if i < 0 {
		c.mu.Unlock()
		c.t.Fatalf("no replica answered yet")
	}
	r := c.reps[i]
	c.reps = slices.Delete(c.reps, i, i+1)
	c.mu.Unlock()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	return r.id
}

// order returns the replicas, the one that answered last first.
func (c *hookCluster) order() []*hookReplica {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.reps)
	if i := slices.IndexFunc(out, func(r *hookReplica) bool { return r.id == c.last }); i > 0 {
		out[0], out[i] = out[i], out[0]
	}
	return out
}

// call posts req to path as Metacontroller does, trying the replicas in
// turn until one gives an answer (200, 400 or 409); connection errors,
// 429 (loading, or a follower) and 5xx send it to the next. It gives up
// when ctx ends or after 2000 rounds.
func (c *hookCluster) call(ctx context.Context, path string, req *hooks.Request) (int, *hooks.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	var last error
	for range 2000 {
		for _, r := range c.order() {
			code, resp, err := c.post(ctx, r.url+path, body)
			if err != nil {
				last = fmt.Errorf("%s: %w", r.id, err)
				c.transports.Add(1)
				continue
			}
			c.mu.Lock()
			c.last = r.id
			c.mu.Unlock()
			return code, resp, nil
		}
		if err := backoff.Sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, nil, fmt.Errorf("%s: %w (last: %v)", path, err, last)
		}
	}
	return 0, nil, fmt.Errorf("%s: no replica answered (last: %v)", path, last)
}

var errNoAnswer = errors.New("no answer")

func (c *hookCluster) post(ctx context.Context, url string, body []byte) (int, *hooks.Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(hreq)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var out hooks.Response
		if err := json.Unmarshal(data, &out); err != nil {
			return 0, nil, fmt.Errorf("decode answer: %w: %s", err, data)
		}
		return resp.StatusCode, &out, nil
	case http.StatusBadRequest, http.StatusConflict:
		return resp.StatusCode, nil, nil
	}
	return 0, nil, fmt.Errorf("%w: %d %s", errNoAnswer, resp.StatusCode, bytes.TrimSpace(data))
}

// stormParent is a parent of the storm and the VNI it was told.
type stormParent struct {
	name string
	vni  uint16
}

// stormLedger is what the storm's clients were told.
type stormLedger struct {
	mu      sync.Mutex
	live    map[string]stormParent // by UID: parents that stay
	deleted map[string]stormParent // by UID: parents deleted
	errs    []error
	synced  atomic.Int64 // parents with an acknowledged VNI
	refused atomic.Int64 // 409 answers, all expected
}

func (l *stormLedger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *stormLedger) record(into map[string]stormParent, uid, name string, vni uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	into[uid] = stormParent{name, vni}
}

// hookObject is a parent as a hook request carries it.
func hookObject(j *batchv1.Job) *hooks.Object {
	o := &hooks.Object{APIVersion: "batch/v1", Kind: "Job", Metadata: hooks.ObjectMeta{
		Namespace: j.Namespace, Name: j.Name, UID: string(j.UID), Annotations: j.Annotations}}
	if j.DeletionTimestamp != nil {
		ts := j.DeletionTimestamp.UTC().Format(time.RFC3339)
		o.Metadata.DeletionTimestamp = &ts
	}
	return o
}

func stormJob(ns string, i int) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("job-%05d", i), Finalizers: []string{stormFinalizer},
			Annotations: map[string]string{"slingshot.hpe.com/vni": "job"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
}

// syncVNI calls /sync for o and returns the VNI it answers.
func (c *hookCluster) syncVNI(ctx context.Context, o *hooks.Object) (uint16, error) {
	code, resp, err := c.call(ctx, "/sync", &hooks.Request{Object: o})
	switch {
	case err != nil:
		return 0, err
	case code != http.StatusOK:
		return 0, fmt.Errorf("sync of %s (UID %s), which exists: code %d", o.Metadata.Name, o.Metadata.UID, code)
	case len(resp.Attachments) != 1 || resp.Attachments[0].Spec.VNI == 0:
		return 0, fmt.Errorf("sync of %s: no VNI in %+v", o.Metadata.Name, resp)
	}
	return resp.Attachments[0].Spec.VNI, nil
}

// finalize calls /finalize for o and checks the answer's finalized.
func (c *hookCluster) finalize(ctx context.Context, o *hooks.Object, observed bool, want bool) error {
	req := &hooks.Request{Object: o, Finalizing: true}
	if observed {
		req.Attachments = map[string]map[string]*hooks.Object{hooks.KindVNI + "." + hooks.APIVersion: {
			"vni-" + o.Metadata.UID: {APIVersion: hooks.APIVersion, Kind: hooks.KindVNI}}}
	}
	code, resp, err := c.call(ctx, "/finalize", req)
	switch {
	case err != nil:
		return err
	case code != http.StatusOK:
		return fmt.Errorf("finalize of %s (deleting, observed %v): code %d", o.Metadata.Name, observed, code)
	case resp.Finalized != want:
		return fmt.Errorf("finalize of %s (observed %v): finalized %v, want %v", o.Metadata.Name, observed, resp.Finalized, want)
	}
	return nil
}

// stay is the life of a parent that stays: synced twice (a resync) to
// the same VNI; one in five also gets a forged /finalize (a deletion the
// API server does not see), which must be refused.
func (c *hookCluster) stay(ctx context.Context, l *stormLedger, o *hooks.Object, vni uint16, forge bool) error {
	l.record(l.live, o.Metadata.UID, o.Metadata.Name, vni)
	if forge {
		forged := *o
		ts := time.Now().UTC().Format(time.RFC3339)
		forged.Metadata.DeletionTimestamp = &ts
		code, _, err := c.call(ctx, "/finalize", &hooks.Request{Object: &forged, Finalizing: true})
		if err != nil {
			return err
		}
		if code != http.StatusConflict {
			return fmt.Errorf("forged finalize of live %s: code %d, want 409", o.Metadata.Name, code)
		}
		l.refused.Add(1)
		if again, err := c.syncVNI(ctx, o); err != nil || again != vni {
			return fmt.Errorf("sync of %s after a forged finalize: vni %d, %v; want %d", o.Metadata.Name, again, err, vni)
		}
	}
	return nil
}

// leave is the life of a parent that is deleted, as Metacontroller drives
// it with a lagging cache: finalize while the VNI attachment is still
// observed, finalize until finalized, finalize again, drop the finalizer,
// finalize once more after the parent is gone, then a stale /sync of the
// parent as it was alive, which must be refused (no new lease).
func (c *hookCluster) leave(ctx context.Context, l *stormLedger, j *batchv1.Job, vni uint16) error {
	l.record(l.deleted, string(j.UID), j.Name, vni)
	jobs := kubeClient(c.t).BatchV1().Jobs(j.Namespace)
	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return fmt.Errorf("delete %s: %w", j.Name, err)
	}
	deleting, err := jobs.Get(ctx, j.Name, metav1.GetOptions{})
	if err != nil || deleting.DeletionTimestamp == nil {
		return fmt.Errorf("get %s after delete: %v, %v; want a deletionTimestamp", j.Name, err, deleting)
	}
	o := hookObject(deleting)
	for _, step := range []struct{ observed, want bool }{{true, false}, {false, true}, {false, true}} {
		if err := c.finalize(ctx, o, step.observed, step.want); err != nil {
			return err
		}
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := jobs.Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("drop the finalizer of %s: %w", j.Name, err)
	}
	if _, err := jobs.Get(ctx, j.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s after its finalizer was dropped: %v, want NotFound", j.Name, err)
	}
	if err := c.finalize(ctx, o, false, true); err != nil {
		return err
	}
	code, _, err := c.call(ctx, "/sync", &hooks.Request{Object: hookObject(j)})
	if err != nil {
		return err
	}
	if code != http.StatusConflict {
		return fmt.Errorf("stale sync of deleted %s: code %d, want 409", j.Name, code)
	}
	l.refused.Add(1)
	return nil
}

// life creates parent i in the API server, syncs it twice, then lets it
// stay (odd i) or deletes it (even i).
func (c *hookCluster) life(ctx context.Context, l *stormLedger, ns string, i int) error {
	j, err := kubeClient(c.t).BatchV1().Jobs(ns).Create(ctx, stormJob(ns, i), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create job %d: %w", i, err)
	}
	o := hookObject(j)
	vni, err := c.syncVNI(ctx, o)
	if err != nil {
		return err
	}
	l.synced.Add(1)
	if again, err := c.syncVNI(ctx, o); err != nil || again != vni {
		return fmt.Errorf("resync of %s: vni %d, %v; first answer %d", j.Name, again, err, vni)
	}
	if i%2 == 1 {
		return c.stay(ctx, l, o, vni, i%5 == 0)
	}
	return c.leave(ctx, l, j, vni)
}

// TestItem7HookStormLosesAndDuplicatesNothing (issue 15, item 7): many
// parents, created in the real API server, acquire their VNIs through
// /sync, and half are deleted and finalized, and finalized again, as
// Metacontroller does when its cache lags, while the leading controller is
// SIGKILLed and a replacement started, twice (600 parents from 16 clients
// by default; -hookstorm.jobs, -hookstorm.clients). The hooks confirm
// every body with the API server. Afterwards, in the store as a fresh load reads it:
// every parent that stays holds the VNI it was first told, no VNI is held
// twice, and no deleted parent holds one; forged finalizes and stale syncs
// were refused.
func TestItem7HookStormLosesAndDuplicatesNothing(t *testing.T) {
	ns := newNamespace(t, "hookstorm")
	jobNS := newNamespace(t, "hookjobs")
	logs, err := os.Create(filepath.Join(t.TempDir(), "replicas.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var logMu sync.Mutex
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			defer logMu.Unlock()
			t.Logf("the replicas' last log lines:\n%s", tail(logs.Name(), 100))
		}
	})
	c := &hookCluster{t: t, ns: ns, kc: writeKubeconfig(t), client: &http.Client{Timeout: 15 * time.Second},
		logs: writerFunc(func(b []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			return logs.Write(b)
		})}
	c.start()
	c.start()
	l := &stormLedger{live: map[string]stormParent{}, deleted: map[string]stormParent{}}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	defer func() {
		cancel() // a failed step ends the clients too
		wg.Wait()
	}()
	for range *stormClients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < *stormJobs && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				if err := c.life(ctx, l, jobNS, i); err != nil {
					l.fail(err)
				}
			}
		})
	}
	for _, at := range []int{*stormJobs / 3, 2 * *stormJobs / 3} {
		eventually(t, 10*time.Minute, fmt.Sprintf("%d parents synced", at), func() (bool, string) {
			return l.synced.Load() >= int64(at), fmt.Sprint(l.synced.Load())
		})
		killed := c.killLeader()
		r := c.start()
		t.Logf("SIGKILL of %s after %d parents synced; %s started", killed, l.synced.Load(), r.id)
	}
	wg.Wait()
	t.Logf("%d parents through the hooks in %v; %d calls sent on to another replica", *stormJobs,
		time.Since(start).Round(time.Millisecond), c.transports.Load())
	l.mu.Lock()
	errs := slices.Clone(l.errs)
	l.mu.Unlock()
	for i, err := range errs {
		if i < 20 {
			t.Error(err)
		}
	}
	if len(errs) > 0 {
		t.Errorf("%d parents failed", len(errs))
	}
	checkStormAnswers(t, c, l, jobNS)
	c.stopAll()
	checkStormStore(t, l, ns, jobNS)
}

// checkStormAnswers syncs every parent that stays once more: the
// controller answers the VNI it first told.
func checkStormAnswers(t *testing.T, c *hookCluster, l *stormLedger, jobNS string) {
	t.Helper()
	l.mu.Lock()
	live := maps.Clone(l.live)
	l.mu.Unlock()
	for uid, p := range live {
		o := &hooks.Object{APIVersion: "batch/v1", Kind: "Job", Metadata: hooks.ObjectMeta{Namespace: jobNS, Name: p.name, UID: uid}}
		if vni, err := c.syncVNI(t.Context(), o); err != nil || vni != p.vni {
			t.Errorf("final sync of %s: vni %d, %v; it was told %d", p.name, vni, err, p.vni)
		}
	}
}

// stopAll stops every replica with SIGTERM and waits for it.
func (c *hookCluster) stopAll() {
	c.t.Helper()
	for _, r := range c.order() {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			c.t.Fatal(err)
		}
		if err := waitFor(c.t, r.exited, time.Minute); err != nil {
			c.t.Errorf("replica %s: %v", r.id, err)
		}
		r.exited <- nil // for startReplica's cleanup
	}
}

// checkStormStore loads the store afresh (rolling any journal forward)
// and checks it against what the clients were told: the leases are
// exactly the parents that stay, each with its VNI, and no VNI twice.
func checkStormStore(t *testing.T, l *stormLedger, ns, jobNS string) {
	t.Helper()
	st := openKube(t, ns, "hookstorm-check")
	defer st.Close()
	state, err := st.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string]uint16{}
	byVNI := map[uint16]string{}
	for _, lease := range state.Leases {
		if other, ok := byVNI[lease.VNI]; ok {
			t.Errorf("vni %d held by %s and %s", lease.VNI, other, lease.Key)
		}
		byVNI[lease.VNI] = lease.Key
		byKey[lease.Key] = lease.VNI
	}
	key := func(uid string) string { return "job/" + jobNS + "/" + uid }
	lost := 0
	for uid, p := range l.live {
		if got, ok := byKey[key(uid)]; !ok || got != p.vni {
			lost++
			t.Errorf("%s was told vni %d; the store has %d (present %v)", p.name, p.vni, got, ok)
		}
	}
	kept := 0
	for uid, p := range l.deleted {
		if got, ok := byKey[key(uid)]; ok {
			kept++
			t.Errorf("deleted %s still holds vni %d (it had %d)", p.name, got, p.vni)
		}
	}
	for k, vni := range byKey {
		if _, ok := l.live[strings.TrimPrefix(k, "job/"+jobNS+"/")]; !ok {
			t.Errorf("lease %s (vni %d) belongs to no parent that stays", k, vni)
		}
	}
	t.Logf("store: %d leases for %d parents that stay (%d lost), %d deleted parents (%d still leased), %d VNIs in quarantine; %d hook answers 409 (forged finalizes, stale syncs)",
		len(state.Leases), len(l.live), lost, len(l.deleted), kept, len(state.Quarantine), l.refused.Load())
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.SplitAfter(string(data), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// fakeAPI is an API server of object metadata over HTTP, so that the
// resolver's reads go through the real metadata client, query string and
// all. It keeps two views: etcd's (quorum reads) and the watch cache's
// (resourceVersion=0), which a test may set apart to stand for the lag
// of the cache. It counts reads by path and kind of read.
type fakeAPI struct {
	mu     sync.Mutex
	quorum map[string]*metav1.PartialObjectMetadata
	// cached overrides quorum for resourceVersion=0 reads; a nil value
	// is an object the cache has not seen yet.
	cached map[string]*metav1.PartialObjectMetadata
	reads  map[string]int // "path" (quorum) or "path?rv=0"
	// hold, when set for a path, delays the answer to its reads until
	// the channel closes.
	hold map[string]chan struct{}
	// served receives each path once it has been answered, when set.
	served chan string
}

func newFakeAPI(t *testing.T) (*fakeAPI, metadata.Interface) {
	t.Helper()
	f := &fakeAPI{quorum: map[string]*metav1.PartialObjectMetadata{}, cached: map[string]*metav1.PartialObjectMetadata{},
		reads: map[string]int{}, hold: map[string]chan struct{}{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	md, err := metadata.NewForConfig(&rest.Config{Host: srv.URL, QPS: 1e6, Burst: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	return f, md
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	rv := r.URL.Query().Get("resourceVersion")
	key := r.URL.Path
	if rv != "" {
		key += "?rv=" + rv
	}
	f.mu.Lock()
	f.reads[key]++
	obj := f.quorum[r.URL.Path]
	if c, ok := f.cached[r.URL.Path]; ok && rv == "0" {
		obj = c
	}
	hold := f.hold[r.URL.Path]
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	w.Header().Set("Content-Type", "application/json")
	if obj == nil {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
	} else {
		out := obj.DeepCopy()
		out.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
		_ = json.NewEncoder(w).Encode(out)
	}
	if f.served != nil {
		f.served <- r.URL.Path
	}
}

// path is the API path of o (made by obj), whose resource is resource.
func path(o *metav1.PartialObjectMetadata, resource string) string {
	gv, _ := schema.ParseGroupVersion(o.APIVersion)
	prefix := "/apis/" + gv.String()
	if gv.Group == "" {
		prefix = "/api/" + gv.Version
	}
	return fmt.Sprintf("%s/namespaces/%s/%s/%s", prefix, o.Namespace, resource, o.Name)
}

// put stores o in etcd's view and the watch cache's.
func (f *fakeAPI) put(o *metav1.PartialObjectMetadata, resource string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := path(o, resource)
	f.quorum[p] = o
	delete(f.cached, p)
	return p
}

func (f *fakeAPI) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[key]
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestOwnerCache: how the owner cache and the watch-cache reads answer
// when owners are re-created, deleted, expire, or the watch cache lags.
// Each case resolves pods in order and checks each one's owner and the
// reads that reached the API server.
func TestOwnerCache(t *testing.T) {
	const ttl = 10 * time.Second
	type step struct {
		// do changes the cluster or the clock before the resolve.
		do        func(f *fakeAPI, clk *fakeClock, r *Resolver)
		pod       string
		noUID     bool   // resolve the pod by name only
		wantOwner string // the owner's UID; "" none; "!" the pod is not found
		// wantReads counts reads of the job's path since the case began,
		// quorum and watch cache together, and those of the pod's path
		// with quorum.
		wantJobReads, wantPodQuorum int
	}
	js := obj("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "js-1", nil, nil)
	job1 := obj("batch/v1", "Job", "ml", "train-0", "j-1", js, nil)
	job2 := obj("batch/v1", "Job", "ml", "train-0", "j-2", nil, nil) // job1 re-created, without its JobSet
	pod := func(name, uid string, owner *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
		return obj("v1", "Pod", "ml", name, uid, owner, nil)
	}
	podA, podB, podC := pod("a", "p-a", job1), pod("b", "p-b", job1), pod("c", "p-c", job2)
	jobPath := path(job1, "jobs")
	recreate := func(f *fakeAPI, _ *fakeClock, _ *Resolver) { f.put(job2, "jobs"); f.put(podC, "pods") }
	tests := []struct {
		name  string
		steps []step
	}{
		{"one read for the job's pods", []step{
			{pod: "a", wantOwner: "js-1", wantJobReads: 1},
			{pod: "b", wantOwner: "js-1", wantJobReads: 1},
		}},
		{"expired", []step{
			{pod: "a", wantOwner: "js-1", wantJobReads: 1},
			{do: func(_ *fakeAPI, clk *fakeClock, _ *Resolver) { clk.advance(ttl - time.Nanosecond) }, pod: "b", wantOwner: "js-1", wantJobReads: 1},
			{do: func(_ *fakeAPI, clk *fakeClock, _ *Resolver) { clk.advance(time.Nanosecond) }, pod: "b", wantOwner: "js-1", wantJobReads: 2},
		}},
		{"re-created under its name: the new UID is read, the old one's entry dropped", []step{
			{pod: "a", wantOwner: "js-1", wantJobReads: 1},
			// c's reference names j-2: never served j-1's entry.
			{do: recreate, pod: "c", wantOwner: "j-2", wantJobReads: 2},
			// a's names j-1, gone: etcd confirms; no walk up to the JobSet
			// through j-1's old metadata.
			{pod: "a", wantOwner: "j-1", wantJobReads: 4},
		}},
		{"UID mismatch in the watch cache: a stale old object is confirmed with quorum", []step{
			{do: func(f *fakeAPI, _ *fakeClock, _ *Resolver) {
				recreate(f, nil, nil)
				f.mu.Lock()
				f.cached[jobPath] = job1 // the cache has not seen the re-creation
				f.mu.Unlock()
			}, pod: "c", wantOwner: "j-2", wantJobReads: 2},
		}},
		{"deleted: the sweep's quorum read drops the entry", []step{
			{pod: "a", wantOwner: "js-1", wantJobReads: 1},
			{do: func(f *fakeAPI, _ *fakeClock, r *Resolver) {
				f.mu.Lock()
				delete(f.quorum, jobPath)
				f.mu.Unlock()
				if ok, err := r.OwnerExists(t.Context(), controllerOwner("batch/v1", "Job", "train-0", "j-1")); ok || err != nil {
					t.Errorf("OwnerExists of a deleted job: %v %v", ok, err)
				}
			}, pod: "b", wantOwner: "j-1", wantJobReads: 4}, // 1, the sweep's, then b's two
		}},
		{"just created, not yet in the watch cache", []step{
			{do: func(f *fakeAPI, _ *fakeClock, _ *Resolver) {
				f.mu.Lock()
				f.cached[jobPath] = nil
				f.cached[path(podA, "pods")] = nil
				f.mu.Unlock()
			}, pod: "a", wantOwner: "js-1", wantJobReads: 2, wantPodQuorum: 1},
		}},
		{"a pod named without its UID is read with quorum", []step{
			{pod: "a", noUID: true, wantOwner: "js-1", wantJobReads: 1, wantPodQuorum: 1},
		}},
		{"a pod of another UID is not found", []step{
			{do: func(f *fakeAPI, _ *fakeClock, _ *Resolver) {
				f.put(pod("a", "p-a2", job1), "pods")
			}, pod: "a", wantOwner: "!", wantPodQuorum: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, md := newFakeAPI(t)
			for _, o := range []*metav1.PartialObjectMetadata{podA, podB} {
				f.put(o, "pods")
			}
			f.put(js, "jobsets")
			f.put(job1, "jobs")
			clk := &fakeClock{now: time.Unix(1000, 0)}
			r := NewResolver(md, DefaultKinds, WithOwnerCache(ttl, 8), WithClock(clk.Now))
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(f, clk, r)
				}
				uid := map[string]string{"a": "p-a", "b": "p-b", "c": "p-c"}[s.pod]
				if s.noUID {
					uid = ""
				}
				res, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: s.pod, UID: uid})
				switch {
				case s.wantOwner == "!":
					if !errors.Is(err, controller.ErrNotFound) {
						t.Errorf("step %d: pod %s: %v, want not found", i, s.pod, err)
					}
				case err != nil:
					t.Fatalf("step %d: pod %s: %v", i, s.pod, err)
				case s.wantOwner == "" && res.Owner != nil, s.wantOwner != "" && (res.Owner == nil || res.Owner.UID != s.wantOwner):
					t.Errorf("step %d: pod %s: owner %+v, want UID %q", i, s.pod, res.Owner, s.wantOwner)
				}
				jobReads := f.count(jobPath) + f.count(jobPath+"?rv=0")
				podQuorum := f.count(path(podA, "pods")) + f.count(path(podB, "pods")) + f.count(path(podC, "pods"))
				if jobReads != s.wantJobReads || podQuorum != s.wantPodQuorum {
					t.Errorf("step %d: pod %s: %d job reads, %d quorum pod reads; want %d, %d", i, s.pod, jobReads, podQuorum, s.wantJobReads, s.wantPodQuorum)
				}
			}
		})
	}
}

// TestGangReadsOwnerOnce: n concurrent acquires of one job's pods read
// the Job once (and its JobSet once), each pod once from the watch cache,
// nothing with quorum. The Job's read is held until every pod's read has
// been answered, so that all n resolutions want the Job while its first
// read is in flight.
func TestGangReadsOwnerOnce(t *testing.T) {
	const n = 256
	f, md := newFakeAPI(t)
	js := obj("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "js-1", nil, nil)
	job := obj("batch/v1", "Job", "ml", "train-0", "j-1", js, nil)
	f.put(js, "jobsets")
	jobPath := f.put(job, "jobs")
	release := make(chan struct{})
	f.hold[jobPath] = release
	f.served = make(chan string, 2*n+2)
	for i := range n {
		f.put(obj("v1", "Pod", "ml", fmt.Sprintf("train-0-%d", i), fmt.Sprintf("p-%d", i), job, nil), "pods")
	}
	r := NewResolver(md, DefaultKinds)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := r.ResolvePod(t.Context(), controller.PodRef{Namespace: "ml", Name: fmt.Sprintf("train-0-%d", i), UID: fmt.Sprintf("p-%d", i)})
			if err == nil && (res.Owner == nil || res.Owner.UID != "js-1") {
				err = fmt.Errorf("pod %d: owner %+v, want the JobSet", i, res.Owner)
			}
			errs <- err
		})
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for pods := 0; pods < n; {
		select {
		case p := <-f.served:
			if strings.Contains(p, "/pods/") {
				pods++
			}
		case <-timeout.C:
			t.Fatalf("%d of %d pods read within a minute", pods, n)
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	var podCached, podQuorum int
	f.mu.Lock()
	for k, v := range f.reads {
		if strings.Contains(k, "/pods/") {
			if strings.HasSuffix(k, "?rv=0") {
				podCached += v
			} else {
				podQuorum += v
			}
		}
	}
	f.mu.Unlock()
	jsPath := path(js, "jobsets")
	if got := f.count(jobPath + "?rv=0"); got != 1 || f.count(jobPath) != 0 {
		t.Errorf("the Job was read %d times from the watch cache and %d with quorum, want once and never", got, f.count(jobPath))
	}
	if got := f.count(jsPath + "?rv=0"); got != 1 {
		t.Errorf("the JobSet was read %d times, want once", got)
	}
	if podCached != n || podQuorum != 0 {
		t.Errorf("pods read %d times from the watch cache and %d with quorum, want %d and 0", podCached, podQuorum, n)
	}
}

// TestOwnerCacheLeaderGivesUp: a caller waiting on another's read of the
// same owner reads itself when that read ends with its caller's context,
// rather than take the other's cancellation for an answer.
func TestOwnerCacheLeaderGivesUp(t *testing.T) {
	c := newOwnerCache(time.Minute, 8, time.Now)
	n := objectName{group: "batch", resource: "jobs", namespace: "ml", name: "j"}
	want := obj("batch/v1", "Job", "ml", "j", "j-1", nil, nil)
	lctx, cancel := context.WithCancel(t.Context())
	inRead := make(chan struct{})
	leaderDone := make(chan error, 1)
	go func() {
		_, err := c.get(lctx, n, "j-1", func(ctx context.Context) (*metav1.PartialObjectMetadata, error) {
			close(inRead)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		leaderDone <- err
	}()
	<-inRead
	followerDone := make(chan error, 1)
	var reads int
	go func() {
		got, err := c.get(t.Context(), n, "j-1", func(context.Context) (*metav1.PartialObjectMetadata, error) {
			reads++
			return want, nil
		})
		if err == nil && got != want {
			err = fmt.Errorf("got %v", got)
		}
		followerDone <- err
	}()
	// The follower may reach the flight before or after the leader gives
	// up: either way it must read for itself.
	cancel()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v", err)
	}
	if err := <-followerDone; err != nil || reads != 1 {
		t.Fatalf("follower: %v after %d reads, want the object after 1", err, reads)
	}
	if c.len() != 1 {
		t.Fatalf("%d entries, want 1", c.len())
	}
}

// TestOwnerCacheBounded: a full cache drops expired entries first, and
// never holds more than its size.
func TestOwnerCacheBounded(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	c := newOwnerCache(time.Second, 4, clk.Now)
	put := func(i int) {
		uid := types.UID(fmt.Sprintf("u-%d", i))
		n := objectName{resource: "jobs", namespace: "ml", name: fmt.Sprintf("j-%d", i)}
		if _, err := c.get(t.Context(), n, uid, func(context.Context) (*metav1.PartialObjectMetadata, error) {
			return obj("batch/v1", "Job", "ml", n.name, string(uid), nil, nil), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		put(i)
	}
	clk.advance(2 * time.Second)
	put(4)
	if c.len() != 1 {
		t.Fatalf("%d entries after the expired were dropped, want 1", c.len())
	}
	for i := 5; i < 12; i++ {
		put(i)
		if c.len() > 4 {
			t.Fatalf("%d entries, more than the size 4", c.len())
		}
	}
}

// A read that fails is an error, not a gone owner, and is not cached.
func TestOwnerCacheReadError(t *testing.T) {
	c := newOwnerCache(time.Minute, 8, time.Now)
	n := objectName{resource: "jobs", namespace: "ml", name: "j"}
	boom := apierrors.NewTooManyRequests("slow down", 1)
	if _, err := c.get(t.Context(), n, "j-1", func(context.Context) (*metav1.PartialObjectMetadata, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the read's error", err)
	}
	if c.len() != 0 {
		t.Fatal("a failed read was cached")
	}
}

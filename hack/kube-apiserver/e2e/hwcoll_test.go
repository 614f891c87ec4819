package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// syncBuffer is a log sink the replicas' readers write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHWCollNothingLeaksAcrossSIGKILL runs slingshot-controller binaries
// on the kube store with hardware collectives against the fake fabric
// manager (real HTTP, OAuth), and SIGKILLs the leader twice: once after
// the fabric manager made a job's reservation and before it answered,
// once after the job's lease was freed and before the release got
// through. The job's pods on two nodes get one reservation; nothing is
// left at the fabric manager at the end, and another cluster's
// reservation is never touched.
func TestHWCollNothingLeaksAcrossSIGKILL(t *testing.T) {
	ns := newNamespace(t, "hwcoll")
	cs := kubeClient(t)
	ctx := t.Context()
	kubeconfig := writeKubeconfig(t)

	fm := fakefm.New(fakefm.Options{ClientID: "slingshot", ClientSecret: "s3cret"})
	fmSrv := httptest.NewServer(fm)
	t.Cleanup(fmSrv.Close)
	authDir := t.TempDir()
	for name, v := range map[string]string{hwcoll.OAuthEndpointFile: fmSrv.URL + fakefm.TokenPath,
		hwcoll.OAuthClientIDFile: "slingshot", hwcoll.OAuthClientSecretFile: "s3cret"} {
		if err := os.WriteFile(filepath.Join(authDir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other, err := hwcoll.New(hwcoll.Options{URL: fmSrv.URL, OAuthDir: authDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reserve(ctx, "east-1234", 2); err != nil {
		t.Fatal(err)
	}

	// A Job and two of its pods (no Job controller or scheduler runs).
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "train"}}, Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no,
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	job, err := cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: batchv1.JobSpec{Template: tmpl, ManualSelector: ptr(true),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"job": "train"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr(true)}
	for i := range 2 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%d", i), Labels: map[string]string{"job": "train"},
			OwnerReferences: []metav1.OwnerReference{ref}}, Spec: tmpl.Spec}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fmJobID := "k8s-" + string(job.UID)

	var logs syncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", logs.String())
		}
	}()
	flags := []string{"--hwcoll-fm-url", fmSrv.URL, "--hwcoll-oauth-dir", authDir, "--hwcoll-addrs-per-job", "4",
		"--hwcoll-reconcile-interval", "1h", "--sweep-interval", "500ms"}
	acquire := func(ctx context.Context, r *replica, pod, node string) (*apiv1.JobVNILease, error) {
		return r.client.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{Pod: &apiv1.PodRef{Namespace: ns, Name: pod}, Node: node})
	}
	// leader waits until r leads and has loaded the state: it answers.
	leader := func(r *replica) {
		t.Helper()
		eventually(t, time.Minute, "replica "+r.id+" serving", func() (bool, string) {
			_, err := r.client.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
			return err == nil, fmt.Sprint(err)
		})
	}

	// 1. SIGKILL between the reservation and its answer.
	r1 := startReplica(t, ns, "r1", kubeconfig, &logs, flags...)
	leader(r1)
	hold := fm.Hold(http.MethodPost, fakefm.JobsPath)
	done := make(chan error, 1)
	go func() {
		_, err := acquire(ctx, r1, "train-0", "n1")
		done <- err
	}()
	select {
	case <-hold.Arrived():
	case err := <-done:
		t.Fatalf("acquire returned before the fabric manager got the POST: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no POST reached the fabric manager")
	}
	if err := r1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the acquire of a killed controller succeeded")
	}
	hold.Release()
	if _, ok := fm.Jobs()[fmJobID]; !ok || fm.Created() != 2 {
		t.Fatalf("fabric manager jobs %v: want the reservation made before the kill", fm.Jobs())
	}

	r2 := startReplica(t, ns, "r2", kubeconfig, &logs, flags...)
	leader(r2)
	var key string
	for i, node := range []string{"n1", "n2"} {
		l, err := acquire(ctx, r2, fmt.Sprintf("train-%d", i), node)
		if err != nil {
			t.Fatal(err)
		}
		c := l.GetCollectives()
		if c.GetMcastToken() != fm.Jobs()[fmJobID].SessionToken || c.GetJobId() != fmJobID || c.GetAddrsPerJob() != 4 ||
			c.GetFabricMgrUrl() != fmSrv.URL+hwcoll.MulticastsPath {
			t.Fatalf("node %s: collectives %v, want the one reservation's", node, c)
		}
		key = l.GetKey()
	}
	if fm.Created() != 2 {
		t.Fatalf("%d job objects created, want the other cluster's and the job's one", fm.Created())
	}

	// 2. SIGKILL between the lease's deletion and the release.
	fm.FailNext(http.MethodDelete, 1_000_000, http.StatusServiceUnavailable)
	for _, node := range []string{"n1", "n2"} {
		if _, err := r2.client.ReleaseJobVNI(ctx, &apiv1.ReleaseJobVNIRequest{Key: key, Node: node}); err != nil {
			t.Fatal(err)
		}
	}
	// Background: no garbage collector runs to lift an orphan finalizer.
	bg := metav1.DeletePropagationBackground
	if err := cs.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "a DELETE of the freed job's reservation", func() (bool, string) {
		for _, c := range fm.Calls() {
			if c.Method == http.MethodDelete {
				return true, ""
			}
		}
		return false, "none yet"
	})
	if err := r2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r2.exited
	r2.exited <- nil // for the cleanup
	fm.ClearFailures()
	if _, ok := fm.Jobs()[fmJobID]; !ok {
		t.Fatal("released though every DELETE failed")
	}

	r3 := startReplica(t, ns, "r3", kubeconfig, &logs, flags...)
	leader(r3)
	eventually(t, time.Minute, "the orphan's release", func() (bool, string) {
		jobs := fm.Jobs()
		_, ok := jobs[fmJobID]
		return !ok, fmt.Sprint(jobs)
	})
	if _, ok := fm.Jobs()["east-1234"]; !ok {
		t.Fatal("the other cluster's reservation was released")
	}
}

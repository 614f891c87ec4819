package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLostLeadershipExits: a leader whose Lease another holder takes over
// while it runs (as after a partition from the API server) exits with an
// error instead of staying on as a follower, so that the agents'
// connections to it close and they reconnect, through the Service, to the
// new leader; the kubelet restarts it.
func TestLostLeadershipExits(t *testing.T) {
	ns := newNamespace(t, "lost")
	var logs lockedBuffer
	r := startReplica(t, ns, "r0", writeKubeconfig(t), &logs,
		"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms")
	ctx := t.Context()
	eventually(t, time.Minute, "r0 answers as the leader", func() (bool, string) {
		_, err := r.client.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
		return err == nil, fmt.Sprint(err)
	})
	leases := kubeClient(t).CoordinationV1().Leases(ns)
	stolen := time.Now()
	eventually(t, 30*time.Second, "the Lease taken over", func() (bool, string) {
		l, err := leases.Get(ctx, "slingshot-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity = ptr("intruder")
		l.Spec.LeaseDurationSeconds = ptr(int32(3600))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, "conflict with a renewal" // r0 renewed in between: again
		}
		if err != nil {
			t.Fatal(err)
		}
		return true, ""
	})
	select {
	case err := <-r.exited:
		r.exited <- err // for the cleanup
		// Status 1 is the program's error return; a crash, a flag error
		// or a signal ends it otherwise.
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("r0 ended with %v after losing leadership; want exit status 1; log:\n%s", err, logs.String())
		}
		t.Logf("r0 exited %v after the Lease was taken: %v", time.Since(stolen).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatalf("r0 still runs 30s after its Lease was taken; log:\n%s", logs.String())
	}
	// On its way out r0 must leave the Lease to its new holder: releasing
	// or renewing it would hand the leadership back to nobody, or to r0.
	l, err := leases.Get(ctx, "slingshot-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != "intruder" {
		t.Errorf("Lease holder after r0 exited = %v, want intruder; log:\n%s", ptrString(h), logs.String())
	}
}

// ptrString prints a *string, "<nil>" for nil.
func ptrString(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *p)
}

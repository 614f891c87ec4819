package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/kubelet-e2e/harness"
)

const nicResource = harness.NICResource

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "slingshot-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := harness.BuildAgent(dir, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	newNode     = harness.NewNode
	newNodeSpec = harness.NewNodeSpec
	newPod      = harness.NewPod
	newPodFor   = harness.NewPodFor
	itoa        = harness.Itoa
)

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	harness.Eventually(t, timeout, what, cond)
}

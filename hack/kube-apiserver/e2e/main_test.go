package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/hack/kube-apiserver/apiserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// srv is the API server every test shares.
var srv *apiserver.Server

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	return apiserver.RunTests("kstore-e2e", "make e2e-k8s installs etcd-server and builds bin/kube-apiserver", kube.CRDs, "crds/*.yaml",
		func(s *apiserver.Server) int {
			srv = s
			return m.Run()
		})
}

var (
	clientsetOnce sync.Once
	clientset     kubernetes.Interface
)

func kubeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	clientsetOnce.Do(func() {
		cs, err := kubernetes.NewForConfig(srv.Config)
		if err != nil {
			t.Fatal(err)
		}
		clientset = cs
	})
	return clientset
}

// ensureNamespace creates namespace ns unless it exists.
func ensureNamespace(t testing.TB, ns string) string {
	t.Helper()
	_, err := kubeClient(t).CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	return ns
}

// newNamespace returns a fresh namespace for one test.
func newNamespace(t testing.TB, prefix string) string {
	t.Helper()
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", t.Name(), time.Now().UnixNano()))
	return ensureNamespace(t, prefix+"-"+hex.EncodeToString(h[:5]))
}

func openKube(t testing.TB, ns, identity string) *kube.Store {
	t.Helper()
	st, err := kube.New(srv.Config, kube.Options{Namespace: ns, Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	controllerOnce sync.Once
	controllerBin  string
	controllerErr  error
)

// controllerBinary builds slingshot-controller, as it ships, once.
func controllerBinary(t testing.TB) string {
	t.Helper()
	controllerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kstore-controller")
		if err != nil {
			controllerErr = err
			return
		}
		controllerBin = filepath.Join(dir, "slingshot-controller")
		cmd := exec.Command("go", "build", "-o", controllerBin, "./cmd/slingshot-controller")
		cmd.Dir = filepath.Join("..", "..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			controllerErr = fmt.Errorf("build slingshot-controller: %v\n%s", err, out)
		}
	})
	if controllerErr != nil {
		t.Fatal(controllerErr)
	}
	return controllerBin
}

// writeKubeconfig writes a kubeconfig for the test API server, as admin.
func writeKubeconfig(t testing.TB) string {
	t.Helper()
	return writeTokenKubeconfig(t, srv.Config.BearerToken)
}

// writeTokenKubeconfig writes a kubeconfig for the test API server that
// authenticates with token alone.
func writeTokenKubeconfig(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
`, srv.Config.Host, token)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually polls cond every 50 ms until it holds, and fails the test
// with cond's last word when it does not within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v (last: %s)", what, d, last)
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}

func ptr[T any](v T) *T { return &v }

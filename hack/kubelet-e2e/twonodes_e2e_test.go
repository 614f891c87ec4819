package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// TestTwoNodesShareJobVNI runs two agents (two processes, two kubelets)
// against one controller: two pods of one job on different nodes share a
// VNI; a pod of another job never does.
func TestTwoNodesShareJobVNI(t *testing.T) {
	ctx := t.Context()
	job1 := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "solver", UID: "11111111-0000-4000-8000-000000000001", Controller: ptr(true)}
	job2 := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "other", UID: "22222222-0000-4000-8000-000000000002", Controller: ptr(true)}
	a1 := newPod("hpc", "solver-a", 1, job1)
	b1 := newPod("hpc", "solver-b", 1, job1)
	a2 := newPod("hpc", "other-a", 1, job2)

	pki := newPKI(t)
	addr := startController(t, ctx, pki, []*v1.Pod{a1, b1, a2}, []*metav1.OwnerReference{job1, job2})

	nodes := map[string]*node{}
	for _, name := range []string{"node-a", "node-b"} {
		n := newNode(t, name, 2, 1)
		n.startKubelet(ctx)
		cert, key := pki.issue(t, "slingshot-agent:"+name)
		n.startAgent("--controller", addr, "--controller-ca", pki.caFile, "--controller-cert", cert, "--controller-key", key)
		eventually(t, 10*time.Second, name+" registered", func() (bool, string) {
			c, _ := n.kubelet.Capacity(nicResource)
			return c == 2, itoa(c)
		})
		nodes[name] = n
	}

	vniOf := func(n *node, p *v1.Pod, netns uint32) uint16 {
		t.Helper()
		n.startSandbox(p, netns)
		if _, err := n.kubelet.Admit(ctx, p); err != nil {
			t.Fatalf("admit %s on %s: %v", p.Name, n.name, err)
		}
		for _, svcs := range n.allServices() {
			for _, s := range svcs {
				if s.Members[0].ID == netns {
					return s.VNIs[0]
				}
			}
		}
		t.Fatalf("no service for %s on %s", p.Name, n.name)
		return 0
	}
	va1 := vniOf(nodes["node-a"], a1, 4026535001)
	vb1 := vniOf(nodes["node-b"], b1, 4026535002)
	va2 := vniOf(nodes["node-a"], a2, 4026535003)
	t.Logf("job solver: VNI %d on node-a, %d on node-b; job other: VNI %d", va1, vb1, va2)
	if va1 != vb1 {
		t.Errorf("pods of one job got VNIs %d and %d", va1, vb1)
	}
	if va2 == va1 {
		t.Errorf("two jobs share VNI %d", va1)
	}
}

func ptr[T any](v T) *T { return &v }

// startController serves the controller's gRPC API on loopback over TLS,
// requiring agent certificates, with owner resolution over a fake
// metadata API that holds the pods and their Jobs.
func startController(t *testing.T, ctx context.Context, pki *testPKI, pods []*v1.Pod, jobs []*metav1.OwnerReference) string {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, OwnerReferences: p.OwnerReferences},
		})
	}
	for _, j := range jobs {
		objs = append(objs, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: j.APIVersion, Kind: j.Kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: pods[0].Namespace, Name: j.Name, UID: types.UID(j.UID)},
		})
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, objs...)

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "controller.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := controller.New(st, owner.NewResolver(md, owner.DefaultKinds), nil, controller.Config{})
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pki.serverCert},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	g := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(auth.UnaryInterceptor(auth.MTLS{Prefix: "slingshot-agent:"})))
	grpcapi.NewServer(svc, time.Minute).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(runCtx) })
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() {
		g.Stop()
		cancel()
		wg.Wait()
		_ = st.Close()
	})
	return lis.Addr().String()
}

// testPKI is a CA with a server certificate for 127.0.0.1.
type testPKI struct {
	dir        string
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	caFile     string
	pool       *x509.CertPool
	serverCert tls.Certificate
	serial     int64
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slingshot test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", der)
	certFile, keyFile := p.issue(t, "slingshot-controller")
	sc, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	p.serverCert = sc
	return p
}

// issue writes a certificate for cn (valid for 127.0.0.1, client and
// server use) and its key, and returns their files.
func (p *testPKI) issue(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(p.dir, cn+".pem")
	keyFile = filepath.Join(p.dir, cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

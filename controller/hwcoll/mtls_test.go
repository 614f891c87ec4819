package hwcoll_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func issue(t *testing.T, cn string, parent *keyPair, isCA bool, usage x509.ExtKeyUsage) *keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &keyPair{cert: c, key: key, der: der}
}

func (k *keyPair) write(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	kb, err := x509.MarshalECPrivateKey(k.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// A fabric manager that requires a client certificate signed by its CA
// accepts the client's, and refuses a client without one.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := issue(t, "fm-ca", nil, true, x509.ExtKeyUsageAny)
	server := issue(t, "fm", ca, false, x509.ExtKeyUsageServerAuth)
	client := issue(t, "slingshot-controller", ca, false, x509.ExtKeyUsageClientAuth)
	caFile, _ := ca.write(t, dir, "ca")
	certFile, keyFile := client.write(t, dir, "client")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	srv := httptest.NewUnstartedServer(fakefm.New(fakefm.Options{}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{server.der}, PrivateKey: server.key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	c, err := hwcoll.New(hwcoll.Options{URL: srv.URL, CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(t.Context(), "k8s-u", 2); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	anon, err := hwcoll.New(hwcoll.Options{URL: srv.URL, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.List(t.Context()); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	untrusting, err := hwcoll.New(hwcoll.Options{URL: srv.URL, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.List(t.Context()); err == nil || hwcoll.Temporary(err) {
		t.Fatalf("untrusted server certificate: %v; want a permanent error", err)
	}
}

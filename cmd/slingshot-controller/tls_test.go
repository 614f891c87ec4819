package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA signs server certificates for localhost.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a certificate for localhost with the given serial number
// and its key to certFile and keyFile, each replaced by a rename as the
// kubelet replaces a Secret's files.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	replace(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// servedSerial makes one TLS handshake with a server of tc and returns
// the serial number of the certificate it presented.
func servedSerial(t *testing.T, tc *tls.Config, roots *x509.CertPool) int64 {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		done <- err
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	serial := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return serial
}

// Issue 15, item 10: the chart's certificates are renewed in place
// (cert-manager rewrites the Secret, the kubelet the mounted files); the
// controller serves the new one at the next handshake, without a restart,
// and keeps the last good one while the files do not form a pair.
func TestIssue15Item10CertReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newTestCA(t)
	ca.issue(t, 100, certFile, keyFile)
	tc, err := serverTLS(&Config{TLSCert: certFile, TLSKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, tc, ca.pool); got != 100 {
		t.Fatalf("served certificate %d, want 100", got)
	}
	ca.issue(t, 200, certFile, keyFile)
	if got := servedSerial(t, tc, ca.pool); got != 200 {
		t.Fatalf("after the renewal: served certificate %d, want 200", got)
	}
	replace(t, certFile, []byte("not a certificate"))
	if got := servedSerial(t, tc, ca.pool); got != 200 {
		t.Fatalf("with a broken file: served certificate %d, want the last good one, 200", got)
	}
	if _, err := serverTLS(&Config{TLSCert: certFile, TLSKey: keyFile}); err == nil {
		t.Fatal("a broken pair at start was accepted")
	}
}

// Issue 15, item 10: the controller's HTTP servers (hooks, metrics) have
// read, header, write and idle timeouts.
func TestIssue15Item10ControllerHTTPTimeouts(t *testing.T) {
	s := newHTTPServer(nil)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("timeouts: header %v, read %v, write %v, idle %v", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	}
	if s.ReadHeaderTimeout > s.ReadTimeout {
		t.Fatalf("header timeout %v above the read timeout %v", s.ReadHeaderTimeout, s.ReadTimeout)
	}
}

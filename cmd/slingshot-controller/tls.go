package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// serverTLS is the gRPC port's TLS configuration: the key pair of
// --tls-cert and --tls-key, re-read when the files change, and with
// --client-ca the agents' client certificates required (read at start).
func serverTLS(c *Config) (*tls.Config, error) {
	kp := &keyPair{certFile: c.TLSCert, keyFile: c.TLSKey}
	if _, err := kp.load(); err != nil {
		return nil, err
	}
	tc := &tls.Config{GetCertificate: kp.get, MinVersion: tls.VersionTLS12}
	if c.ClientCA != "" {
		pem, err := os.ReadFile(c.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client ca %s: no certificate", c.ClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// keyPair serves the certificate in certFile and keyFile, read again at
// every handshake and parsed again when they changed: cert-manager renews
// the certificate in its Secret, the kubelet updates the mounted files,
// and the next agent to connect gets the new one without a restart. A
// pair that does not load (read between the two files' updates) leaves
// the last good one in place. It is safe for concurrent use.
type keyPair struct {
	certFile, keyFile string

	mu              sync.Mutex
	certPEM, keyPEM []byte
	cert            *tls.Certificate
}

// load reads the files and, when they changed and form a valid pair,
// makes them the pair served. It returns the pair served.
func (k *keyPair) load() (*tls.Certificate, error) {
	certPEM, cerr := os.ReadFile(k.certFile)
	keyPEM, kerr := os.ReadFile(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if cerr != nil || kerr != nil {
		return k.served(fmt.Errorf("tls key pair: %w", errors.Join(cerr, kerr)))
	}
	if k.cert != nil && bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return k.cert, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return k.served(fmt.Errorf("tls key pair %s, %s: %w", k.certFile, k.keyFile, err))
	}
	k.cert, k.certPEM, k.keyPEM = &cert, certPEM, keyPEM
	return k.cert, nil
}

// served returns the pair served, or err when there is none yet. Called
// with mu held.
func (k *keyPair) served(err error) (*tls.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, err
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return k.load() }

// Timeouts of the controller's HTTP servers (hooks, metrics). None
// streams; the hooks' write timeout leaves room for their look-ups in the
// API server within Metacontroller's own hook timeout.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpWriteTimeout      = 60 * time.Second
	httpIdleTimeout       = 120 * time.Second
)

// newHTTPServer returns a server of h with the controller's timeouts, so
// that a slow or idle client cannot hold a connection open.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout}
}

package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// pki is the node's credentials: one CA for every serving and client
// certificate, a service-account key pair, and static tokens for the
// components (the API server's token file).
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	tokens map[string]string // user → token
}

// The users of the token file: name, groups.
var tokenUsers = []struct{ user, groups string }{
	{"admin", "system:masters"},
	{"system:kube-controller-manager", ""},
	{"system:kube-scheduler", ""},
	// system:node:<name> is added per node.
}

// pkiNode is one kubelet the credentials are made for: its serving
// certificate names it and its address, and it gets the token of
// system:node:<name>.
type pkiNode struct {
	name string
	ip   net.IP
}

// kubeletCert is the base name of node name's kubelet serving
// certificate and key in the pki directory.
func kubeletCert(name string) string { return "kubelet-" + name }

// newPKI makes the credentials of a cluster whose API server serves on
// apiIPs, for the kubelets of nodes.
func newPKI(dir string, apiIPs []net.IP, nodes []pkiNode) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir, tokens: map[string]string{}}
	var err error
	if p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "slingshot-real-node-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	if err := p.writeCert("ca", der, p.caKey); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: apiIPs,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.issue("apiserver", serving); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		kubeletServing := &x509.Certificate{
			Subject:     pkix.Name{CommonName: n.name},
			DNSNames:    []string{n.name, "localhost"},
			IPAddresses: []net.IP{n.ip, net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if err := p.issue(kubeletCert(n.name), kubeletServing); err != nil {
			return nil, err
		}
	}
	// The API server's client certificate towards the kubelet (logs,
	// exec); the kubelet trusts the CA for client certificates.
	kubeletClient := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.issue("apiserver-kubelet-client", kubeletClient); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := p.writeKey("sa", saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	var csv strings.Builder
	users := slices.Clone(tokenUsers)
	for _, n := range nodes {
		users = append(users, struct{ user, groups string }{"system:node:" + n.name, "system:nodes"})
	}
	for i, u := range users {
		tok, err := randomToken()
		if err != nil {
			return nil, err
		}
		p.tokens[u.user] = tok
		fmt.Fprintf(&csv, "%s,%s,uid-%d,%q\n", tok, u.user, i, u.groups)
	}
	if err := os.WriteFile(p.path("tokens.csv"), []byte(csv.String()), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// issue signs tmpl with the CA and writes NAME.crt and NAME.key.
func (p *pki) issue(name string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = p.caCert.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("certificate %s: %w", name, err)
	}
	return p.writeCert(name, der, key)
}

func (p *pki) writeCert(name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(p.path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return p.writeKey(name, key)
}

func (p *pki) writeKey(name string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(p.path(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// kubeconfig writes a kubeconfig for user at path.
func (p *pki) kubeconfig(path, server, user string) error {
	const tmpl = `apiVersion: v1
kind: Config
clusters:
- name: real-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: real-node
  context: {cluster: real-node, user: %s}
current-context: real-node
`
	return os.WriteFile(path, fmt.Appendf(nil, tmpl, server, p.path("ca.crt"), user, p.tokens[user], user), 0o600)
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Options say where the binaries are.
type Options struct {
	// KubeAPIServer is the kube-apiserver binary.
	KubeAPIServer string
	// Etcd is the etcd binary; default /usr/bin/etcd.
	Etcd string
	// Dir holds the data, certificates and logs; it must exist.
	Dir string
	// Ready bounds the wait for etcd and for /readyz; default 3 min (the
	// first start on a busy 2-core machine is slow).
	Ready time.Duration
	// Args are added to kube-apiserver's command line.
	Args []string
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	// Config reaches the API server as an admin (system:masters), without
	// a client rate limit.
	Config *rest.Config
	// URL of the API server and EtcdURL of etcd's client endpoint.
	URL, EtcdURL string
	// Logs of both processes.
	EtcdLog, APIServerLog string

	etcd, apiserver *exec.Cmd
	exited          map[*exec.Cmd]chan error
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts etcd and kube-apiserver and waits until the API server's
// /readyz answers ok. It returns an error (with the log's tail) when a
// process exits or is not ready in time; nothing is left running then.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Etcd == "" {
		o.Etcd = "/usr/bin/etcd"
	}
	if o.Ready == 0 {
		o.Ready = 3 * time.Minute
	}
	for _, b := range []string{o.Etcd, o.KubeAPIServer} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("binary: %w", err)
		}
	}
	s := &Server{exited: map[*exec.Cmd]chan error{}}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	s.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	s.EtcdLog = filepath.Join(o.Dir, "etcd.log")
	s.etcd, err = s.spawn(s.EtcdLog, o.Etcd,
		"--name", "default",
		"--data-dir", filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls", s.EtcdURL, "--advertise-client-urls", s.EtcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--quota-backend-bytes", strconv.Itoa(4<<30))
	if err != nil {
		return nil, err
	}
	wait := backoff.Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Factor: 1.5, Attempts: 1 << 20}
	readyCtx, cancel := context.WithTimeout(ctx, o.Ready)
	defer cancel()
	hc := &http.Client{Timeout: 5 * time.Second}
	if err := wait.Do(readyCtx, func(ctx context.Context) error {
		if err := s.checkAlive(s.etcd, s.EtcdLog); err != nil {
			return backoff.Permanent(err)
		}
		return get(ctx, hc, s.EtcdURL+"/health", "", `"health":"true"`)
	}); err != nil {
		return nil, fmt.Errorf("etcd not healthy: %w\n%s", err, tail(s.EtcdLog))
	}

	token, err := s.credentials(o.Dir)
	if err != nil {
		return nil, err
	}
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	s.APIServerLog = filepath.Join(o.Dir, "kube-apiserver.log")
	s.apiserver, err = s.spawn(s.APIServerLog, o.KubeAPIServer, append([]string{
		"--etcd-servers", s.EtcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		// No kubernetes Service endpoints: loopback may not be advertised
		// to pods, and these tests run none.
		"--endpoint-reconciler-type", "none",
		"--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(o.Dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(o.Dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(o.Dir, "sa.key"),
		"--authorization-mode", "RBAC",
		"--token-auth-file", filepath.Join(o.Dir, "tokens.csv"),
		"--service-cluster-ip-range", "10.96.0.0/24"}, o.Args...)...)
	if err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := wait.Do(readyCtx, func(ctx context.Context) error {
		if err := s.checkAlive(s.apiserver, s.APIServerLog); err != nil {
			return backoff.Permanent(err)
		}
		return get(ctx, insecure, s.URL+"/readyz", token, "ok")
	}); err != nil {
		return nil, fmt.Errorf("kube-apiserver not ready: %w\n%s", err, tail(s.APIServerLog))
	}
	s.Config = &rest.Config{Host: s.URL, BearerToken: token, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: time.Minute}
	return s, nil
}

func (s *Server) spawn(logPath, bin string, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	done := make(chan error, 1)
	s.exited[cmd] = done
	go func() {
		done <- cmd.Wait()
		f.Close()
	}()
	return cmd, nil
}

func (s *Server) checkAlive(cmd *exec.Cmd, log string) error {
	select {
	case err := <-s.exited[cmd]:
		s.exited[cmd] <- err
		return fmt.Errorf("%s exited: %v\n%s", filepath.Base(cmd.Path), err, tail(log))
	default:
		return nil
	}
}

func get(ctx context.Context, c *http.Client, url, token, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// credentials writes the service-account key pair and a token file with
// one admin token, which it returns.
func (s *Server) credentials(dir string) (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	files["tokens.csv"] = []byte(token + ",admin,uid-admin,system:masters\n")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	return token, nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// Stop stops the API server, then etcd (SIGTERM, then SIGKILL after 20 s).
func (s *Server) Stop() {
	for _, cmd := range []*exec.Cmd{s.apiserver, s.etcd} {
		if cmd == nil || cmd.Process == nil {
			continue
		}
		done := s.exited[cmd]
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(20 * time.Second)
		select {
		case err := <-done:
			done <- err
		case <-t.C:
			_ = cmd.Process.Kill()
			done <- <-done
		}
		t.Stop()
	}
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates every CustomResourceDefinition in the YAML files of
// fsys matching pattern and waits until each is established.
func (s *Server) InstallCRDs(ctx context.Context, fsys fs.FS, pattern string) error {
	files, err := fs.Glob(fsys, pattern)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no file matches %s", pattern)
	}
	dc, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return err
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := dc.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create crd %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	wait := backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Factor: 1.5, Attempts: 600}
	for _, n := range names {
		if err := wait.Do(ctx, func(ctx context.Context) error {
			u, err := dc.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established")
		}); err != nil {
			return fmt.Errorf("crd %s: %w", n, err)
		}
	}
	return nil
}

// ObjectCount returns how many objects the API server keeps in etcd under
// prefix: "" for all of them, "slingshot.hpe.com/nodeslices/" for one
// resource (keys are /registry/<prefix>...). It asks etcd directly (a
// count-only range), so the figure is exact, not the API server's
// periodically refreshed apiserver_resource_objects gauge.
func (s *Server) ObjectCount(ctx context.Context, prefix string) (int, error) {
	key := "/registry/" + prefix
	end := []byte(key)
	end[len(end)-1]++
	body, err := json.Marshal(map[string]any{"key": []byte(key), "range_end": end, "count_only": true})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.EtcdURL+"/v3/kv/range", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("etcd range: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Count string `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("etcd range: %s: %v", resp.Status, err)
	}
	if out.Count == "" {
		return 0, nil
	}
	return strconv.Atoi(out.Count)
}

// EtcdDBSize returns etcd's database size in bytes.
func (s *Server) EtcdDBSize(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.EtcdURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_mvcc_db_total_size_in_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("etcd metrics: no etcd_mvcc_db_total_size_in_bytes (%v)", sc.Err())
}

package hwcoll

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Paths under the fabric manager's URL, as Slurm's client uses them.
const (
	// JobsPath holds the job objects.
	JobsPath = "/fabric/collectives/jobs"
	// MulticastsPath is where a job's processes ask for multicast
	// addresses; Slurm hands it to them as FI_CXI_COLL_FABRIC_MGR_URL.
	MulticastsPath = "/fabric/collectives/multicasts"
)

// maxBody bounds what is read of any answer: a job object or a list of
// job links is small, and a misbehaving server must not exhaust memory.
const maxBody = 4 << 20

// ErrUnauthorized is wrapped by errors for answers 401 and 403 that a
// fresh token did not cure (or that came without OAuth).
var ErrUnauthorized = errors.New("fabric manager refused the credentials")

// ErrBadAnswer is wrapped by errors for answers that do not parse.
var ErrBadAnswer = errors.New("malformed fabric manager answer")

// StatusError is an answer with an unexpected HTTP status.
type StatusError struct {
	Method, Path string
	Status       int
	// Detail is the answer's "detail", if it had one.
	Detail string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("fabric manager %s %s: status %d", e.Method, e.Path, e.Status)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes a 401 or 403 match ErrUnauthorized.
func (e *StatusError) Is(target error) bool {
	return target == ErrUnauthorized && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden)
}

// Temporary reports whether err may pass if the call is repeated: a
// transport error, a timeout, or a status of 429 or 5xx. Refused
// credentials, an untrusted server certificate, malformed answers and
// other statuses are not.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return se.Status == http.StatusTooManyRequests || se.Status >= 500
	}
	if errors.Is(err, ErrBadAnswer) || errors.Is(err, ErrUnauthorized) || errors.Is(err, errConfig) {
		return false
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		// The server's certificate is not trusted: no retry changes that.
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	_, netErr := errors.AsType[net.Error](err)
	_, urlErr := errors.AsType[*url.Error](err)
	return netErr || urlErr
}

// errConfig marks errors of the client's own files (unreadable
// credentials): no retry cures them.
var errConfig = errors.New("fabric manager client configuration")

// Options configure a Client. URL is required; authentication is OAuth
// (OAuthDir), mTLS (CertFile and KeyFile), both, or none.
type Options struct {
	// URL is the fabric manager's base URL, e.g. https://fmn:8000.
	URL string
	// OAuthDir holds the OAuth client credentials in the files Slurm's
	// client reads: "endpoint" (the token URL), "client-id" and
	// "client-secret". They are read at every token fetch, so a rotated
	// Secret takes effect at the next one.
	OAuthDir string
	// CAFile checks the server's certificate (and the token endpoint's);
	// empty uses the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate for mTLS; they are
	// read at every handshake.
	CertFile, KeyFile string
	// Timeout bounds one request; default 10 s, as Slurm's.
	Timeout time.Duration
	// Transport replaces the one built from the TLS files (tests).
	Transport http.RoundTripper
}

// Client talks to one fabric manager.
type Client struct {
	base    string
	hc      *http.Client
	timeout time.Duration
	oauth   *oauthSource
}

// New returns a client; it checks the options and reads the CA file, and
// otherwise makes no request.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: fabric manager url %q: want http(s)://host[:port][/path]", errConfig, o.URL)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("%w: client certificate and key go together", errConfig)
	}
	rt := o.Transport
	if rt == nil {
		tc, err := tlsConfig(o.CAFile, o.CertFile, o.KeyFile)
		if err != nil {
			return nil, err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		rt = t
	}
	c := &Client{base: strings.TrimRight(o.URL, "/"), timeout: o.Timeout,
		// Redirects are not followed: a POST must not turn into a GET.
		hc: &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	if o.OAuthDir != "" {
		c.oauth = &oauthSource{dir: o.OAuthDir, hc: c.hc, timeout: c.timeout}
	}
	return c, nil
}

func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", errConfig, caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		// Read at each handshake, so that a renewed certificate (a
		// Secret's files replaced) is used without a restart.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("load client certificate: %w", err)
			}
			return &cert, nil
		}
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", errConfig, err)
		}
	}
	return tc, nil
}

// JobURL is the path of job id's object.
func JobURL(id string) string { return JobsPath + "/" + url.PathEscape(id) }

// Reserve returns the session token of job id's reservation of
// mcastLimit multicast addresses, creating the job object unless it
// exists: asking twice reserves once, as Slurm's client does (GET, then
// POST on 404). Errors wrap ErrUnauthorized, ErrBadAnswer or a
// *StatusError; see [Temporary].
func (c *Client) Reserve(ctx context.Context, id string, mcastLimit int) (string, error) {
	path := JobURL(id)
	status, body, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return "", err
	}
	switch {
	case status == http.StatusOK:
		tok, err := ParseJob(body)
		if err != nil {
			return "", fmt.Errorf("fabric manager GET %s: %w", path, err)
		}
		return tok, nil
	case status != http.StatusNotFound:
		return "", statusError(http.MethodGet, path, status, body)
	}
	req := map[string]any{"jobID": id, "mcastLimit": mcastLimit}
	status, body, err = c.do(ctx, http.MethodPost, JobsPath, req)
	if err != nil {
		return "", err
	}
	if status < 200 || status > 299 {
		return "", statusError(http.MethodPost, JobsPath, status, body)
	}
	tok, err := ParseJob(body)
	if err != nil {
		return "", fmt.Errorf("fabric manager POST %s: %w", JobsPath, err)
	}
	return tok, nil
}

// Release deletes job id's object, releasing its multicast addresses. An
// object already gone (404) is released. Errors as for Reserve.
func (c *Client) Release(ctx context.Context, id string) error {
	path := JobURL(id)
	status, body, err := c.do(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return err
	}
	if (status >= 200 && status <= 299) || status == http.StatusNotFound {
		return nil
	}
	return statusError(http.MethodDelete, path, status, body)
}

// List returns the IDs of every job object at the fabric manager, of
// whichever workload manager made it. Errors as for Reserve.
func (c *Client) List(ctx context.Context) ([]string, error) {
	path := JobsPath + "/"
	status, body, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, statusError(http.MethodGet, path, status, body)
	}
	ids, err := ParseJobList(body)
	if err != nil {
		return nil, fmt.Errorf("fabric manager GET %s: %w", path, err)
	}
	return ids, nil
}

func statusError(method, path string, status int, body []byte) error {
	return &StatusError{Method: method, Path: path, Status: status, Detail: ParseDetail(body)}
}

// do sends one request and returns the answer's status and body. With
// OAuth, a 401 or 403 fetches a new token and repeats the request once,
// as Slurm's client does; the second answer is returned as it is.
func (c *Client) do(ctx context.Context, method, path string, payload any) (int, []byte, error) {
	var data []byte
	if payload != nil {
		var err error
		if data, err = json.Marshal(payload); err != nil {
			return 0, nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		var auth string
		if c.oauth != nil {
			tok, err := c.oauth.token(ctx, attempt > 0)
			if err != nil {
				return 0, nil, err
			}
			auth = "Bearer " + tok
		}
		status, body, err := c.send(ctx, method, path, data, auth)
		if err != nil {
			return 0, nil, err
		}
		if c.oauth != nil && attempt == 0 && (status == http.StatusUnauthorized || status == http.StatusForbidden) {
			continue
		}
		return status, body, nil
	}
}

func (c *Client) send(ctx context.Context, method, path string, data []byte, auth string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if data != nil {
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: %w", errConfig, method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("fabric manager %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := readBody(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("fabric manager %s %s: read answer: %w", method, path, err)
	}
	return resp.StatusCode, body, nil
}

func readBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("%w: answer longer than %d bytes", ErrBadAnswer, maxBody)
	}
	return b, nil
}

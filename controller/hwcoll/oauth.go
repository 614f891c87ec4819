package hwcoll

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The files of the OAuth directory, as Slurm's client names them.
const (
	OAuthEndpointFile     = "endpoint"
	OAuthClientIDFile     = "client-id"
	OAuthClientSecretFile = "client-secret"
)

// oauthSource fetches and caches an access token by the OAuth2
// client-credentials grant.
type oauthSource struct {
	dir     string
	hc      *http.Client
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	tok     string
	expires time.Time // zero: until refused
}

// token returns the cached token, or a new one when fresh is set, none is
// cached or the cached one has expired. The lock is held across the fetch
// so that concurrent callers share one.
func (o *oauthSource) token(ctx context.Context, fresh bool) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	if !fresh && o.tok != "" && (o.expires.IsZero() || now().Before(o.expires)) {
		return o.tok, nil
	}
	o.tok = ""
	tok, ttl, err := o.fetch(ctx)
	if err != nil {
		return "", err
	}
	o.tok, o.expires = tok, time.Time{}
	if ttl > 0 {
		// Renew a little early: a token that expires in flight is refused.
		o.expires = now().Add(ttl - min(ttl/10, 30*time.Second))
	}
	return tok, nil
}

func (o *oauthSource) fetch(ctx context.Context) (string, time.Duration, error) {
	endpoint, err := readAuthFile(o.dir, OAuthEndpointFile)
	if err != nil {
		return "", 0, err
	}
	id, err := readAuthFile(o.dir, OAuthClientIDFile)
	if err != nil {
		return "", 0, err
	}
	secret, err := readAuthFile(o.dir, OAuthClientSecretFile)
	if err != nil {
		return "", 0, err
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}, "scope": {"openid"}}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("%w: oauth endpoint %q: %w", errConfig, endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := o.hc.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("oauth token: %w", err)
	}
	defer resp.Body.Close()
	body, err := readBody(resp.Body)
	if err != nil {
		return "", 0, fmt.Errorf("oauth token: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// The endpoint's path, not its full URL, in the error: it may
		// carry a query the operator would rather not log.
		return "", 0, &StatusError{Method: http.MethodPost, Path: req.URL.Path, Status: resp.StatusCode, Detail: ParseDetail(body)}
	}
	tok, ttl, err := ParseToken(body)
	if err != nil {
		return "", 0, fmt.Errorf("oauth token: %w", err)
	}
	return tok, ttl, nil
}

// readAuthFile returns the file's content without trailing newlines, as
// Slurm's client reads it.
func readAuthFile(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("%w: oauth credentials: %w", errConfig, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%w: oauth credentials: %s is empty", errConfig, filepath.Join(dir, name))
	}
	return s, nil
}

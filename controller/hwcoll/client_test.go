package hwcoll_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/internal/fakefm"
)

// start serves fm and returns a client of it; oauth writes the credentials
// directory (with secret) and uses it.
func start(t *testing.T, fm *fakefm.FM, oauth bool, secret string) (*hwcoll.Client, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(fm)
	t.Cleanup(srv.Close)
	o := hwcoll.Options{URL: srv.URL}
	if oauth {
		dir := t.TempDir()
		for name, v := range map[string]string{hwcoll.OAuthEndpointFile: srv.URL + fakefm.TokenPath + "\n",
			hwcoll.OAuthClientIDFile: "slingshot\n", hwcoll.OAuthClientSecretFile: secret + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		o.OAuthDir = dir
	}
	c, err := hwcoll.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func TestReserveOnceListRelease(t *testing.T) {
	fm := fakefm.New(fakefm.Options{ClientID: "slingshot", ClientSecret: "s3cret"})
	c, _ := start(t, fm, true, "s3cret")
	ctx := t.Context()
	tok, err := c.Reserve(ctx, "k8s-uid-1", 4)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Reserve(ctx, "k8s-uid-1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if tok == "" || again != tok {
		t.Fatalf("tokens %q then %q: want one non-empty token", tok, again)
	}
	if n := fm.Created(); n != 1 {
		t.Fatalf("%d job objects created, want 1", n)
	}
	if j := fm.Jobs()["k8s-uid-1"]; j.MCastLimit != 4 {
		t.Fatalf("mcastLimit %d, want 4", j.MCastLimit)
	}
	ids, err := c.List(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "k8s-uid-1" {
		t.Fatalf("List = %v, %v", ids, err)
	}
	if err := c.Release(ctx, "k8s-uid-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "k8s-uid-1"); err != nil {
		t.Fatalf("second release (404): %v", err)
	}
	if len(fm.Jobs()) != 0 {
		t.Fatalf("jobs left: %v", fm.Jobs())
	}
}

func TestOAuthRefreshAndRefusal(t *testing.T) {
	fm := fakefm.New(fakefm.Options{ClientID: "slingshot", ClientSecret: "s3cret", ExpiresIn: 3600})
	c, _ := start(t, fm, true, "s3cret")
	if _, err := c.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A revoked token is refused once; the client fetches a new one and
	// repeats the call.
	fm.RevokeTokens()
	if _, err := c.List(t.Context()); err != nil {
		t.Fatalf("after revocation: %v", err)
	}
	tokens := 0
	for _, call := range fm.Calls() {
		if call.Path == fakefm.TokenPath {
			tokens++
		}
	}
	if tokens != 2 {
		t.Fatalf("%d token fetches, want 2", tokens)
	}

	bad, _ := start(t, fm, true, "wrong")
	_, err := bad.Reserve(t.Context(), "k8s-x", 1)
	if !errors.Is(err, hwcoll.ErrUnauthorized) || hwcoll.Temporary(err) {
		t.Fatalf("wrong secret: %v; want a permanent ErrUnauthorized", err)
	}
	none, _ := start(t, fm, false, "")
	_, err = none.List(t.Context())
	if !errors.Is(err, hwcoll.ErrUnauthorized) {
		t.Fatalf("no credentials: %v; want ErrUnauthorized", err)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name      string
		fail      func(*fakefm.FM)
		call      func(context.Context, *hwcoll.Client) error
		temporary bool
		status    int
	}{
		{"reserve 500", func(f *fakefm.FM) { f.FailNext("", 1, 500) },
			func(ctx context.Context, c *hwcoll.Client) error { _, err := c.Reserve(ctx, "a", 1); return err }, true, 500},
		{"post 503", func(f *fakefm.FM) { f.FailNext(http.MethodPost, 1, 503) },
			func(ctx context.Context, c *hwcoll.Client) error { _, err := c.Reserve(ctx, "a", 1); return err }, true, 503},
		{"release 429", func(f *fakefm.FM) { f.FailNext(http.MethodDelete, 1, 429) },
			func(ctx context.Context, c *hwcoll.Client) error { return c.Release(ctx, "a") }, true, 429},
		{"list 400", func(f *fakefm.FM) { f.FailNext(http.MethodGet, 1, 400) },
			func(ctx context.Context, c *hwcoll.Client) error { _, err := c.List(ctx); return err }, false, 400},
		{"mcastLimit 0 refused", func(*fakefm.FM) {},
			func(ctx context.Context, c *hwcoll.Client) error { _, err := c.Reserve(ctx, "a", 0); return err }, false, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fm := fakefm.New(fakefm.Options{})
			c, _ := start(t, fm, false, "")
			tt.fail(fm)
			err := tt.call(t.Context(), c)
			se, ok := errors.AsType[*hwcoll.StatusError](err)
			if !ok || se.Status != tt.status || se.Detail == "" {
				t.Fatalf("err %v: want a StatusError %d with the answer's detail", err, tt.status)
			}
			if hwcoll.Temporary(err) != tt.temporary {
				t.Fatalf("Temporary(%v) = %v", err, !tt.temporary)
			}
		})
	}
}

func TestTransportErrorIsTemporary(t *testing.T) {
	fm := fakefm.New(fakefm.Options{})
	c, srv := start(t, fm, false, "")
	srv.Close()
	_, err := c.List(t.Context())
	if err == nil || !hwcoll.Temporary(err) {
		t.Fatalf("closed server: %v; want a temporary error", err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []hwcoll.Options{
		{URL: ""}, {URL: "ftp://fm"}, {URL: "http://"},
		{URL: "https://fm", CertFile: "/c"},
		{URL: "https://fm", CAFile: filepath.Join(t.TempDir(), "missing")},
	} {
		if _, err := hwcoll.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

package ipamwire

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, raw  string
		wantStatus int
		wantBody   string
		wantErr    string
	}{
		{name: "ok with length", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", wantStatus: 200, wantBody: "{}"},
		{name: "length cuts trailing bytes", raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}xyz", wantStatus: 200, wantBody: "{}"},
		{name: "no length: to the end", raw: "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\r\n{\"code\":100}", wantStatus: 400, wantBody: `{"code":100}`},
		{name: "header name case", raw: "HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nab", wantStatus: 200, wantBody: "a"},
		{name: "cut short", raw: "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nab", wantErr: "cut short"},
		{name: "no header end", raw: "HTTP/1.0 200 OK\r\nContent-Length: 1", wantErr: "complete header"},
		{name: "not http", raw: "SSH-2.0-OpenSSH\r\n\r\n", wantErr: "status line"},
		{name: "bad code", raw: "HTTP/1.0 2x0 OK\r\n\r\n", wantErr: "status line"},
		{name: "bad length", raw: "HTTP/1.0 200 OK\r\nContent-Length: -1\r\n\r\n", wantErr: "Content-Length"},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", wantErr: "Transfer-Encoding"},
		{name: "header without colon", raw: "HTTP/1.0 200 OK\r\nbogus\r\n\r\n", wantErr: "header line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := parseAnswer([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseAnswer: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || status != tc.wantStatus || string(body) != tc.wantBody {
				t.Fatalf("parseAnswer = %d %q %v, want %d %q", status, body, err, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func FuzzParseAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n{\"code\":100,\"msg\":\"x\"}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		status, body, err := parseAnswer(raw)
		if err == nil && (status < 100 || status > 999 || len(body) > len(raw)) {
			t.Fatalf("parseAnswer(%q) = %d, %d bytes", raw, status, len(body))
		}
	})
}

// serve answers the protocol's calls on a unix socket with net/http, as
// the agent does, using handler.
func serve(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "ipam.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return socket
}

func TestClientAgainstNetHTTP(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var req AddRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusMethodNotAllowed)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case PathAdd:
			if req.Network == "taken" {
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(Error{Code: CodeAddressTaken, Msg: "address taken"})
				return
			}
			// A long answer: net/http would chunk it for HTTP/1.1.
			_ = json.NewEncoder(w).Encode(AddResponse{Pool: req.Pool + strings.Repeat(" ", 8<<10)})
		case PathDel:
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, "plain text, not JSON", http.StatusNotFound)
		}
	})
	c := NewClient(socket, 0)
	ctx := t.Context()

	got, err := c.Add(ctx, AddRequest{Network: "hsn", Pool: "p1"})
	if err != nil || strings.TrimSpace(got.Pool) != "p1" {
		t.Fatalf("Add = %.40q, %v; want pool p1", got.Pool, err)
	}
	if err := c.Del(ctx, DelRequest{Network: "hsn"}); err != nil {
		t.Fatalf("Del: %v", err)
	}
	_, err = c.Add(ctx, AddRequest{Network: "taken"})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeAddressTaken {
		t.Fatalf("Add of a taken address: %v, want code %d", err, CodeAddressTaken)
	}
	_, err = c.GC(ctx, GCRequest{})
	if !errors.As(err, &e) || e.Code != CodeIOFailure || !strings.Contains(e.Details, "plain text") {
		t.Fatalf("GC against a plain-text 404: %v, want an I/O failure carrying the text", err)
	}
}

func TestClientNoAgent(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "absent.sock"), 0)
	err := c.Del(t.Context(), DelRequest{})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTryAgainLater {
		t.Fatalf("Del without an agent: %v, want code %d (try again later)", err, CodeTryAgainLater)
	}
}

func TestClientGivesUpOnAStalledAgent(t *testing.T) {
	release := make(chan struct{})
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
	})
	defer close(release)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cancel  bool
	}{
		{name: "call timeout", timeout: 50 * time.Millisecond},
		{name: "context cancelled", timeout: time.Hour, cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				// Cancelled once the request is on its way; the client
				// must not wait out its hour.
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			err := NewClient(socket, tc.timeout).Del(ctx, DelRequest{})
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeTryAgainLater {
				t.Fatalf("Del against a stalled agent: %v, want code %d", err, CodeTryAgainLater)
			}
		})
	}
}

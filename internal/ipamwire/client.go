package ipamwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Default timeouts of a Client: connecting to a live agent's socket is
// immediate, so a connect that takes long means no agent; a call may wait
// on the controller for a new slice when the node's are full.
const (
	DefaultDialTimeout = 2 * time.Second
	DefaultCallTimeout = 30 * time.Second
)

// maxAnswer bounds an answer's body: they are a few hundred bytes.
const maxAnswer = 1 << 20

// Client calls the agent over its unix socket. It speaks HTTP/1.0 itself,
// one request per connection, rather than through net/http: the plugin is
// a process the runtime starts for every pod attachment, and net/http
// with the TLS stack it links roughly doubled the binary and added half a
// millisecond to each start (BenchmarkAdd/plugin). The agent's side is
// net/http; HTTP/1.0 keeps its answers plain: no chunking, the connection
// closed after the body.
type Client struct {
	socket      string
	callTimeout time.Duration
}

// NewClient returns a client of the agent listening on socket. Calls fail
// after callTimeout (0: DefaultCallTimeout), whatever the context says.
func NewClient(socket string, callTimeout time.Duration) *Client {
	if callTimeout <= 0 {
		callTimeout = DefaultCallTimeout
	}
	return &Client{socket: socket, callTimeout: callTimeout}
}

// Add asks for the attachment's address.
func (c *Client) Add(ctx context.Context, req AddRequest) (AddResponse, error) {
	var out AddResponse
	return out, c.call(ctx, PathAdd, req, &out)
}

// Del frees the attachment's address.
func (c *Client) Del(ctx context.Context, req DelRequest) error {
	return c.call(ctx, PathDel, req, nil)
}

// Check verifies the attachment's address.
func (c *Client) Check(ctx context.Context, req CheckRequest) error {
	return c.call(ctx, PathCheck, req, nil)
}

// GC frees the network's allocations that are not valid.
func (c *Client) GC(ctx context.Context, req GCRequest) (GCResponse, error) {
	var out GCResponse
	return out, c.call(ctx, PathGC, req, &out)
}

// Status asks whether the network can take attachments.
func (c *Client) Status(ctx context.Context, req StatusRequest) (StatusResponse, error) {
	var out StatusResponse
	return out, c.call(ctx, PathStatus, req, &out)
}

// call posts in and decodes the answer into out. Every error is an *Error:
// an agent that cannot be reached is CodeTryAgainLater, so that the
// runtime retries rather than giving up on the pod.
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return &Error{Code: CodeIOFailure, Msg: "encode request", Details: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	status, data, err := c.post(ctx, path, body)
	if err != nil {
		return &Error{Code: CodeTryAgainLater, Msg: fmt.Sprintf("slingshot agent not reachable at %s", c.socket), Details: err.Error()}
	}
	if status != statusOK {
		var e Error
		if err := json.Unmarshal(data, &e); err != nil || e.Code == 0 {
			return &Error{Code: CodeIOFailure, Msg: fmt.Sprintf("slingshot agent answered %d", status), Details: string(bytes.TrimSpace(data))}
		}
		return &e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Code: CodeDecodeFailure, Msg: "decode answer of slingshot agent", Details: err.Error()}
	}
	return nil
}

const statusOK = 200

// post sends one HTTP/1.0 POST of body to path and returns the answer's
// status code and body, read to the end of the connection (at most
// maxAnswer bytes).
func (c *Client) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	d := net.Dialer{Timeout: DefaultDialTimeout}
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return 0, nil, err
		}
	}
	// The context may end before its deadline: unblock the I/O then.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := fmt.Appendf(nil, "POST %s HTTP/1.0\r\nHost: slingshot-agent\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
	if _, err := conn.Write(append(req, body...)); err != nil {
		return 0, nil, fmt.Errorf("send request: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(conn, maxAnswer+1))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	if len(raw) > maxAnswer {
		return 0, nil, fmt.Errorf("answer longer than %d bytes", maxAnswer)
	}
	return parseAnswer(raw)
}

// parseAnswer splits an HTTP/1.x answer read to its end into its status
// code and body. The body is what follows the header, cut to its
// Content-Length when the header gives one.
func parseAnswer(raw []byte) (int, []byte, error) {
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return 0, nil, errors.New("answer without a complete header")
	}
	lines := strings.Split(string(head), "\r\n")
	proto, rest, _ := strings.Cut(lines[0], " ")
	code, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
		return 0, nil, fmt.Errorf("malformed status line %q", clip(lines[0]))
	}
	status, err := strconv.Atoi(code)
	if err != nil || status < 100 {
		return 0, nil, fmt.Errorf("malformed status line %q", clip(lines[0]))
	}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return 0, nil, fmt.Errorf("malformed header line %q", clip(l))
		}
		switch {
		case strings.EqualFold(strings.TrimSpace(name), "Transfer-Encoding"):
			return 0, nil, fmt.Errorf("unexpected Transfer-Encoding %q in an HTTP/1.0 answer", clip(strings.TrimSpace(value)))
		case strings.EqualFold(strings.TrimSpace(name), "Content-Length"):
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 {
				return 0, nil, fmt.Errorf("malformed Content-Length %q", clip(value))
			}
			if n > len(body) {
				return 0, nil, fmt.Errorf("answer cut short: %d of %d bytes", len(body), n)
			}
			body = body[:n]
		}
	}
	return status, body, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// AsError returns err as an *Error, wrapping any other error as an I/O
// failure.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeIOFailure, Msg: err.Error()}
}

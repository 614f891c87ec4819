package ipamwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

// Client calls the agent over its unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the agent listening on socket. Calls fail
// after callTimeout (0: DefaultCallTimeout), whatever the context says.
func NewClient(socket string, callTimeout time.Duration) *Client {
	if callTimeout <= 0 {
		callTimeout = DefaultCallTimeout
	}
	d := net.Dialer{Timeout: DefaultDialTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: callTimeout}}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://slingshot-agent"+path, bytes.NewReader(body))
	if err != nil {
		return &Error{Code: CodeIOFailure, Msg: "build request", Details: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Code: CodeTryAgainLater, Msg: fmt.Sprintf("slingshot agent not reachable at %s", c.socket), Details: err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &Error{Code: CodeTryAgainLater, Msg: fmt.Sprintf("read answer of slingshot agent at %s", c.socket), Details: err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if err := json.Unmarshal(data, &e); err != nil || e.Code == 0 {
			return &Error{Code: CodeIOFailure, Msg: fmt.Sprintf("slingshot agent answered %s", resp.Status), Details: string(bytes.TrimSpace(data))}
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

// AsError returns err as an *Error, wrapping any other error as an I/O
// failure.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeIOFailure, Msg: err.Error()}
}

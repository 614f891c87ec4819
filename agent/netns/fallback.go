package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Finder finds a pod's network namespace; [CRI], [Proc] and [Fallback]
// are Finders.
type Finder interface {
	// Open returns a Handle that holds the pod's network namespace until
	// it is closed.
	Open(ctx context.Context, podUID string) (*Handle, error)
}

// Fallback asks First, and Second where First fails. A pod First finds on
// the host network is refused at once: that is an answer, not a failure.
type Fallback struct {
	First, Second Finder
	// Logger notes when First failed and Second answered; nil logs
	// nothing.
	Logger *slog.Logger
}

// Open returns First's Handle, or Second's where First fails. When both
// fail the error wraps both, Second's first. The caller closes the Handle.
func (f Fallback) Open(ctx context.Context, podUID string) (*Handle, error) {
	h, err := f.First.Open(ctx, podUID)
	if err == nil || errors.Is(err, ErrHostNetwork) || ctx.Err() != nil {
		return h, err
	}
	h, err2 := f.Second.Open(ctx, podUID)
	if err2 != nil {
		return nil, fmt.Errorf("%w (before that: %w)", err2, err)
	}
	if f.Logger != nil {
		f.Logger.Warn("network namespace found by the fallback", "uid", podUID, "netns", h.Inode(), "first_err", err)
	}
	return h, nil
}

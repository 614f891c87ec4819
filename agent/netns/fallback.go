package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Finder finds a pod's network namespace inode; [CRI], [Proc] and
// [Fallback] are Finders.
type Finder interface {
	Netns(ctx context.Context, podUID string) (uint32, error)
}

// Fallback asks First, and Second where First fails. A pod First finds on
// the host network is refused at once: that is an answer, not a failure.
type Fallback struct {
	First, Second Finder
	// Logger notes when First failed and Second answered; nil logs
	// nothing.
	Logger *slog.Logger
}

// Netns returns First's answer, or Second's where First fails. When both
// fail the error wraps both, Second's first.
func (f Fallback) Netns(ctx context.Context, podUID string) (uint32, error) {
	ino, err := f.First.Netns(ctx, podUID)
	if err == nil || errors.Is(err, ErrHostNetwork) || ctx.Err() != nil {
		return ino, err
	}
	ino, err2 := f.Second.Netns(ctx, podUID)
	if err2 != nil {
		return 0, fmt.Errorf("%w (before that: %w)", err2, err)
	}
	if f.Logger != nil {
		f.Logger.Warn("network namespace found by the fallback", "uid", podUID, "netns", ino, "first_err", err)
	}
	return ino, nil
}

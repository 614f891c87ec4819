// Package backoff is the project's one retry helper: bounded attempts,
// exponential delays with jitter, and a wait that honours the context.
//
// Every retry loop in the project goes through a Policy so that each one is
// bounded and each one stops when its context ends.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy describes a bounded retry. The zero value makes one attempt.
// A Policy is plain data and safe to share between goroutines.
type Policy struct {
	// Initial is the delay after the first failed attempt.
	Initial time.Duration
	// Max caps every delay; zero means no cap.
	Max time.Duration
	// Factor multiplies the delay after every failure; values below 1 mean 2.
	Factor float64
	// Jitter is the fraction (0..1) of each delay that is randomised, so
	// that many clients retrying together spread out.
	Jitter float64
	// Attempts is the total number of attempts, the first included.
	// Values below 1 mean 1.
	Attempts int
	// Wait sleeps for d or until ctx ends. Nil means a real timer; tests
	// pass a fake to run without sleeping.
	Wait func(ctx context.Context, d time.Duration) error
}

// IsZero reports whether p is the zero Policy, as a configuration that
// leaves its backoff out has it (a single attempt, never what such a caller
// means). Policy is not comparable: Wait is a func.
func (p Policy) IsZero() bool {
	return p.Initial == 0 && p.Max == 0 && p.Factor == 0 && p.Jitter == 0 && p.Attempts == 0 && p.Wait == nil
}

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent wraps err so that [Policy.Do] returns it at once without
// retrying. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Delay returns the delay before attempt n+1 after n failed attempts
// (n starts at 1), jitter included.
func (p Policy) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	factor := p.Factor
	if factor < 1 {
		factor = 2
	}
	d := float64(p.Initial)
	for i := 1; i < n; i++ {
		d *= factor
		if p.Max > 0 && d >= float64(p.Max) {
			d = float64(p.Max)
			break
		}
	}
	if p.Max > 0 && d > float64(p.Max) {
		d = float64(p.Max)
	}
	if j := min(max(p.Jitter, 0), 1); j > 0 {
		// Spread the delay over [d*(1-j), d].
		d -= d * j * rand.Float64()
	}
	return time.Duration(d)
}

// Do calls op until it succeeds, returns a [Permanent] error, the attempts
// are spent or ctx ends. It returns nil on success; otherwise the last
// error of op (unwrapped from Permanent), or ctx's error joined with the
// last error when the context ended first.
func (p Policy) Do(ctx context.Context, op func(ctx context.Context) error) error {
	attempts := max(p.Attempts, 1)
	wait := p.Wait
	if wait == nil {
		wait = Sleep
	}
	var last error
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return errors.Join(err, last)
		}
		err := op(ctx)
		if err == nil {
			return nil
		}
		if perm, ok := errors.AsType[*permanentError](err); ok {
			return perm.err
		}
		last = err
		if n >= attempts {
			return fmt.Errorf("after %d attempts: %w", n, last)
		}
		if werr := wait(ctx, p.Delay(n)); werr != nil {
			return errors.Join(werr, last)
		}
	}
}

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

// recorder is a fake Wait that records the delays instead of sleeping.
type recorder struct{ delays []time.Duration }

func (r *recorder) wait(ctx context.Context, d time.Duration) error {
	r.delays = append(r.delays, d)
	return ctx.Err()
}

func TestDoRetriesUntilSuccess(t *testing.T) {
	rec := &recorder{}
	p := Policy{Initial: 10 * time.Millisecond, Max: 35 * time.Millisecond, Attempts: 5, Wait: rec.wait}
	calls := 0
	err := p.Do(t.Context(), func(context.Context) error {
		calls++
		if calls < 4 {
			return errors.New("busy")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if calls != 4 {
		t.Fatalf("calls = %d, want 4", calls)
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 35 * time.Millisecond}
	if len(rec.delays) != len(want) {
		t.Fatalf("delays = %v, want %v", rec.delays, want)
	}
	for i := range want {
		if rec.delays[i] != want[i] {
			t.Fatalf("delays = %v, want %v", rec.delays, want)
		}
	}
}

func TestDoIsBounded(t *testing.T) {
	rec := &recorder{}
	busy := errors.New("busy")
	p := Policy{Initial: time.Millisecond, Attempts: 3, Wait: rec.wait}
	calls := 0
	err := p.Do(t.Context(), func(context.Context) error { calls++; return busy })
	if !errors.Is(err, busy) {
		t.Fatalf("err = %v, want wrapping %v", err, busy)
	}
	if calls != 3 || len(rec.delays) != 2 {
		t.Fatalf("calls = %d, waits = %d; want 3 and 2", calls, len(rec.delays))
	}
}

func TestDoStopsOnPermanent(t *testing.T) {
	bad := errors.New("invalid")
	calls := 0
	err := Policy{Attempts: 10, Wait: (&recorder{}).wait}.Do(t.Context(), func(context.Context) error {
		calls++
		return Permanent(bad)
	})
	if err != bad || calls != 1 {
		t.Fatalf("err = %v after %d calls, want %v after 1", err, calls, bad)
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
}

func TestDoStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	busy := errors.New("busy")
	calls := 0
	err := Policy{Initial: time.Hour, Attempts: 100}.Do(ctx, func(context.Context) error {
		calls++
		cancel()
		return busy
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, busy) {
		t.Fatalf("err = %v, want canceled joined with busy", err)
	}
	if calls != 1 {
		t.Fatalf("calls = %d, want 1", calls)
	}
}

func TestDelayJitterStaysInRange(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Jitter: 0.5}
	for range 1000 {
		d := p.Delay(1)
		if d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("Delay(1) = %v, want within [50ms, 100ms]", d)
		}
	}
}

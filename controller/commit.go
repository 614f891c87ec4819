package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
)

// batch is one group commit: the ops of every request that changed state
// while the previous batch was being written.
type batch struct {
	ops  []store.Op
	done chan struct{}
	err  error
	once sync.Once
}

// committed reports whether b was written to the store.
func (b *batch) committed() bool {
	select {
	case <-b.done:
		return b.err == nil
	default:
		return false
	}
}

func newBatch() *batch { return &batch{done: make(chan struct{})} }

func (b *batch) finish(err error) {
	b.once.Do(func() {
		b.err = err
		close(b.done)
	})
}

// enqueue adds ops to the filling batch and returns it; call with s.mu held.
func (s *Allocator) enqueue(ops ...store.Op) *batch {
	if len(ops) == 0 {
		return nil
	}
	s.cur.ops = append(s.cur.ops, ops...)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return s.cur
}

// wait blocks until b is committed; nil b means nothing to wait for.
func (s *Allocator) wait(ctx context.Context, b *batch) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve runs the committer and the sweeper until ctx ends or a commit
// fails; it returns the commit's error.
func (s *Allocator) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.sweepLoop(ctx) })
	if s.coll != nil {
		wg.Go(func() { s.coll.run(ctx, s) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.kick:
		}
		s.mu.Lock()
		b := s.cur
		if len(b.ops) == 0 {
			s.mu.Unlock()
			continue
		}
		if c := s.alloc.Cursor(); c != s.cursorSeen {
			m := s.meta["vni-cursor"]
			next := store.Meta{Key: "vni-cursor", Value: strconv.Itoa(int(c)), Version: m.Version + 1}
			b.ops = append(b.ops, store.Put(&next, m.Version))
			s.meta["vni-cursor"], s.cursorSeen = next, c
		}
		s.cur = newBatch()
		s.mu.Unlock()

		start := time.Now()
		err := s.st.Commit(ctx, b.ops)
		s.m.observeCommit(len(b.ops), time.Since(start), err)
		if err != nil {
			err = fmt.Errorf("%w: commit: %w", ErrUnavailable, err)
			b.finish(err)
			s.closeGate(err)
			return err
		}
		b.finish(nil)
	}
}

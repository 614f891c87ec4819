package health

import (
	"context"
	"log/slog"
	"sync"
)

// maxOverruns bounds how many overruns in a row, with no message received
// between them, the link source subscribes again after; past it the kernel
// drops messages faster than the monitor reads them and the source stops.
const maxOverruns = 5

// linkSource passes on the link messages of the watched netdevs. An
// overrun ends the library's subscription, so the source subscribes again
// and has every NIC re-read, since changes may have been missed; any other
// end stops the source and the monitor goes on polling.
type linkSource struct {
	log       *slog.Logger
	subscribe linkSubscriber
	watched   map[string]bool
	out       chan<- linkUpdate
	overrun   func()
}

// linkSub is one subscription: its updates, the channel that ends it and
// the last error it reported.
type linkSub struct {
	updates <-chan linkUpdate
	done    chan struct{}

	mu  sync.Mutex // guards err
	err error
}

func (s *linkSource) open() (*linkSub, error) {
	sub := &linkSub{done: make(chan struct{})}
	updates, err := s.subscribe(sub.done, func(err error) {
		// Called for every error, also those the library carries on
		// after (a message it could not decode); the last one before the
		// channel closes is what ended the subscription.
		s.log.Debug("netlink link events: error", "err", err)
		sub.mu.Lock()
		sub.err = err
		sub.mu.Unlock()
	})
	if err != nil {
		close(sub.done)
		return nil, err
	}
	sub.updates = updates
	return sub, nil
}

func (sub *linkSub) lastErr() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// end closes the subscription and waits until its channel is closed, which
// means everything it ran has stopped.
func (sub *linkSub) end() {
	close(sub.done)
	for range sub.updates {
	}
}

// run forwards updates until ctx ends or the source stops. A subscription
// is ended only once its successor, if any, is open: no change falls
// between the two, and whoever sees it ended knows what came after.
func (s *linkSource) run(ctx context.Context, sub *linkSub) {
	overruns := 0
	for {
		received := s.forward(ctx, sub)
		if ctx.Err() != nil {
			sub.end()
			return
		}
		// The channel is closed: the error that ended it was reported.
		err := sub.lastErr()
		if received {
			overruns = 0
		}
		if !isOverrun(err) || overruns >= maxOverruns {
			s.log.Warn("netlink link events stopped, continuing without it", "err", err)
			sub.end()
			return
		}
		overruns++
		s.log.Warn("netlink link events: kernel dropped notifications, subscribing again and re-reading", "err", err)
		// Subscribe before the re-read, so that a change after the re-read
		// has begun is not missed.
		next, err := s.open()
		sub.end()
		s.overrun()
		if err != nil {
			s.log.Warn("netlink link events stopped, continuing without it", "err", err)
			return
		}
		sub = next
	}
}

// forward passes on the watched netdevs' updates until the subscription's
// channel closes or ctx ends. It reports whether any update came.
func (s *linkSource) forward(ctx context.Context, sub *linkSub) (received bool) {
	for {
		select {
		case <-ctx.Done():
			return received
		case u, ok := <-sub.updates:
			if !ok {
				return received
			}
			received = true
			if !s.watched[u.Name] {
				continue
			}
			select {
			case s.out <- u:
			case <-ctx.Done():
				return received
			}
		}
	}
}

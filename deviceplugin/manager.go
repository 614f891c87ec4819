package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// RunAll runs every server, one gRPC server and socket per resource, until
// ctx ends or one of them fails; a failure stops the others. It returns
// nil after a clean stop, the failures joined otherwise, and an error
// without running anything when two servers share a resource or a socket.
func RunAll(ctx context.Context, servers ...*Server) error {
	names := make(map[string]bool, len(servers))
	sockets := make(map[string]bool, len(servers))
	for _, s := range servers {
		if names[s.name] {
			return fmt.Errorf("%w: resource %s served twice", ErrInvalidConfig, s.name)
		}
		if sockets[s.socketPath] {
			return fmt.Errorf("%w: socket %s used twice", ErrInvalidConfig, s.socketPath)
		}
		names[s.name], sockets[s.socketPath] = true, true
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			if err := s.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("device plugin %s: %w", s.name, err)
				cancel(errs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

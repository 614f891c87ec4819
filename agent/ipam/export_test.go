package ipam

import "context"

// Upkeep runs one pass of Run, for tests that step the allocator.
func Upkeep(a *Allocator, ctx context.Context) { a.upkeep(ctx) }

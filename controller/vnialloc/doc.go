// Package vnialloc hands out VNIs from a configured range, next-fit, with a
// quarantine before a released VNI can be handed out again.
//
// Next-fit (as Slurm's Slingshot plugin does) continues after the last VNI
// handed out and wraps at the end of the range, so a VNI freed a moment ago
// is the last candidate, not the first. The quarantine adds a time bound on
// top: a released VNI stays taken for the quarantine period whatever the
// cursor says. A search costs O(log64 n) word operations over an
// [idset.Set]; the quarantine is a FIFO queue, so both stay cheap at any
// fill level.
//
// VNIs 0, 1 and 10 are never handed out (0 is invalid; 1 and 10 belong to
// the CXI driver's default service). Sub-ranges can be excluded too, such as
// the pod-scoped sub-range that the controller carves into node slices.
//
// An Allocator is plain in-memory state and not safe for concurrent use.
package vnialloc

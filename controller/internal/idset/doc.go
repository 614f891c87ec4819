// Package idset is a fixed-size set of small integers with a next-clear
// search that costs O(log64 n) word operations, never a scan of the whole
// set. The controller's VNI allocator and node-slice pools use it to find
// the next free id after a cursor (next-fit).
//
// A Set is not safe for concurrent use; its owner serialises access.
package idset

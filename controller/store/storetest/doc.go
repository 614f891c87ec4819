// Package storetest is the conformance suite for [store.Store] backends:
// round trips of every record kind, compare-and-swap versions, atomic
// batches and durability across a reopen.
package storetest

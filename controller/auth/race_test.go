//go:build race

package auth

// raceEnabled reports whether the race detector is on: it makes the
// reviews' CPU work several times slower, so tests that time them allow
// more.
const raceEnabled = true

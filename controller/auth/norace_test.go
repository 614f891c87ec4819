//go:build !race

package auth

// raceEnabled reports whether the race detector is on.
const raceEnabled = false

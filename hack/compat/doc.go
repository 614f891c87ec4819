// Package compat checks that HEAD and the baseline release understand
// each other's files and messages; see compat_test.go.
package compat

// Package layers holds no code: its test checks that imports point down
// the project's layers (see ARCHITECTURE.md), with the go command's own
// view of the packages.
package layers

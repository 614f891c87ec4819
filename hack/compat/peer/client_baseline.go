//go:build compat_baseline

// The baseline's (0.2.0) side of what the agent's controller client and
// the controller say of their releases: its controller names none, and
// its client refuses no answer it does not know (it reads an unknown
// scope as none and cuts a VNI to 16 bits).

package main

const controllerHeader = ""

func unsupported(error) bool { return false }

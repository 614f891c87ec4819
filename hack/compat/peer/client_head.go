//go:build !compat_baseline

// HEAD's side of what the agent's controller client and the controller
// say of their releases; the baseline's is in client_baseline.go.

package main

import (
	"errors"

	"github.com/slingshot-k8s/slingshot/controllerclient"
	"github.com/slingshot-k8s/slingshot/internal/version"
)

// controllerHeader is the header in which the controller names its
// release (from 0.3.0).
const controllerHeader = version.ControllerHeader

// unsupported reports whether err is the client's refusal of an answer it
// does not know (from 0.3.0).
func unsupported(err error) bool { return errors.Is(err, controllerclient.ErrUnsupported) }

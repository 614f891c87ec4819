//go:build !embedded_controller

package main

import "github.com/slingshot-k8s/slingshot/agent"

// embeddedController is nil: this binary talks to a cluster controller
// only, and carries neither the controller nor a database. Build with
// -tags embedded_controller for --controller=embedded.
var embeddedController agent.EmbeddedOpener

// defaultController is --controller's default: none, so that the flag is
// required; "embedded" would be refused by this very binary.
const defaultController = ""

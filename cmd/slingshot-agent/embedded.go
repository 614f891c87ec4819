//go:build embedded_controller

package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/agent"
	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/embedded"
)

// embeddedController opens the in-process controller of
// --controller=embedded, its sqlite database in dir. Only a binary built
// with -tags embedded_controller has it, and links the controller and
// sqlite for it.
var embeddedController agent.EmbeddedOpener = func(ctx context.Context, dir string, logger *slog.Logger, reg prometheus.Registerer) (agent.EmbeddedController, error) {
	return embedded.Open(ctx, dir, controller.Config{Logger: logger, Registerer: reg})
}

// defaultController is --controller's default in a binary that has the
// embedded controller: it.
const defaultController = "embedded"

package devplugin

import "github.com/slingshot-k8s/slingshot/agent/internal/agenttest"

// The shared helpers (agenttest), by the names these tests use.
var (
	testLogger        = agenttest.Logger
	testLoggerDiscard = agenttest.Discard
	waitFor           = agenttest.WaitFor
	histogramCount    = agenttest.HistogramCount
)

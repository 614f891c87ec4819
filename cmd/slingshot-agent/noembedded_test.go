//go:build !embedded_controller

package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent"
)

// A binary built without the embedded controller refuses
// --controller=embedded (the flag's default) before it starts anything,
// and says how to get one.
func TestEmbeddedControllerNeedsTheBuildTag(t *testing.T) {
	for _, args := range [][]string{
		{"--node-name", "n"},
		{"--node-name", "n", "--controller", "embedded"},
	} {
		var out bytes.Buffer
		err := run(args, &out, &out)
		if !errors.Is(err, agent.ErrNoEmbeddedController) || exitCode(err) != 2 {
			t.Errorf("%v: err %v, exit %d; want ErrNoEmbeddedController, exit 2", args, err, exitCode(err))
		}
	}
}

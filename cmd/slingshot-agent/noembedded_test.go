//go:build !embedded_controller

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/slingshot-k8s/slingshot/agent"
)

// A binary built without the embedded controller refuses
// --controller=embedded before it starts anything, and says how to get
// one; its --controller has no default, so that a default is never one
// the binary refuses (issue 26).
func TestEmbeddedControllerNeedsTheBuildTag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-name", "n"}, "--controller is required"},
		{[]string{"--node-name", "n", "--controller", "embedded"}, agent.ErrNoEmbeddedController.Error()},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 2 {
			t.Errorf("%v: err %v, exit %d; want %q, exit 2", tc.args, err, exitCode(err), tc.want)
		}
	}
}

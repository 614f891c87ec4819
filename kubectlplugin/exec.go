package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// AgentContainer and AgentCommand are the chart's agent container and the
// command that prints its report as JSON. The container's environment
// (SLINGSHOT_AGENT_INSPECT_ADDR) points the command at the agent's
// loopback /inspect endpoint.
var (
	AgentContainer = "agent"
	AgentCommand   = []string{"/usr/local/bin/slingshot-agent", "inspect", "--json"}
)

// maxReport bounds the report read from an agent, as inspect.Fetch does.
const maxReport = 64 << 20

// ExecInspector gets an agent's report by running AgentCommand in its pod
// through the API server's pods/exec subresource, as `kubectl exec` does.
//
// Why exec and not pods/proxy: the agent serves /inspect only on
// connections to a loopback address (agent/http.go: the report names the
// node's pods and VNIs and the endpoint takes no credentials), and the
// agent runs on the host network, so the API server's proxy, which dials
// the pod's IP, is answered 404; opening /inspect to the pod IP would put
// it on the node's address, reachable by anyone on the network. Exec
// keeps the endpoint closed and lets RBAC decide: the user needs
// "create pods/exec" in the agents' namespace, which the API server
// checks and audits, and nothing listens on a new port.
type ExecInspector struct {
	Config *rest.Config
	Client kubernetes.Interface
}

// Inspect runs the agent's inspect command in agent. It returns an error
// wrapping ErrForbidden when RBAC refuses the exec.
func (e *ExecInspector) Inspect(ctx context.Context, agent *corev1.Pod) (*inspect.Report, error) {
	req := e.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(agent.Namespace).Name(agent.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: AgentContainer, Command: AgentCommand, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	// WebSocket first, SPDY where the server or a proxy on the way does
	// not upgrade to it: kubectl's own order.
	ws, err := remotecommand.NewWebSocketExecutor(e.Config, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("exec in agent %s/%s: %w", agent.Namespace, agent.Name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.Config, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec in agent %s/%s: %w", agent.Namespace, agent.Name, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("exec in agent %s/%s: %w", agent.Namespace, agent.Name, err)
	}
	stdout := &capped{max: maxReport}
	stderr := &capped{max: 4 << 10}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	where := fmt.Sprintf("agent %s/%s on node %s", agent.Namespace, agent.Name, agent.Spec.NodeName)
	var exit utilexec.ExitError
	switch {
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("exec in %s: %w: %w", where, ErrForbidden, err)
	case errors.As(err, &exit):
		return nil, fmt.Errorf("%s: %s exited %d: %s", where, strings.Join(AgentCommand, " "), exit.ExitStatus(), strings.TrimSpace(stderr.String()))
	case err != nil:
		return nil, fmt.Errorf("exec in %s: %w", where, err)
	case stdout.over:
		return nil, fmt.Errorf("%s: report larger than %d bytes", where, maxReport)
	}
	var r inspect.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%s: decode report: %w", where, err)
	}
	return &r, nil
}

// capped keeps the first max bytes written to it and notes whether more
// came; it never fails a write, so the stream is drained.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room < len(p) {
		c.over = true
		c.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

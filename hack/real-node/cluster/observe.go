package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/hack/real-node/node"
)

// Inspect is the agent's own report: NICs, services (with members and
// VNIs, as the driver lists them) and pods.
func (e *Env) Inspect(ctx context.Context) (*inspect.Report, error) {
	if e.cluster == nil {
		return inspect.Fetch(ctx, e.InspectURL)
	}
	return e.inspectInNetns(ctx)
}

// inspectInNetns fetches the report of the agent of a cluster's node,
// which serves it on the node's own loopback, over a connection made in
// the node's network namespace.
func (e *Env) inspectInNetns(ctx context.Context) (*inspect.Report, error) {
	pid := e.Node.InitPID()
	if pid == 0 {
		return nil, fmt.Errorf("inspect %s: the node does not run", e.Node.Name)
	}
	netns := fmt.Sprintf("/proc/%d/ns/net", pid)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, netns, network, addr)
		},
		DisableKeepAlives: true,
	}}
	url := e.InspectURL + inspect.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", e.Node.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("inspect %s: %s: %s", e.Node.Name, resp.Status, bytes.TrimSpace(b))
	}
	var r inspect.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", e.Node.Name, err)
	}
	return &r, nil
}

// dialInNetns dials addr from the network namespace at nsPath: a socket
// stays in the namespace it was made in, so only its making needs a
// thread there: a goroutine of its own, locked to its thread and never
// unlocked, so that the runtime ends the thread with it and the switched
// thread runs nothing else.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	f, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: os.NewSyscallError("setns "+nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// VNIs asks the controller for its leases and quarantine, as an agent
// would: over TLS, trusting the CA the chart made, with a token of the
// agent's ServiceAccount for the controller's audience.
func (e *Env) VNIs(ctx context.Context) (*apiv1.ListVNIsResponse, error) {
	var resp *apiv1.ListVNIsResponse
	err := e.callController(ctx, func(ctx context.Context, c apiv1.ControllerClient) (err error) {
		resp, err = c.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
		return err
	})
	return resp, err
}

// Slices asks the controller, as VNIs does, for its pools and the slices
// leased of them: of pool ("" for every pool) to node ("" for every
// node).
func (e *Env) Slices(ctx context.Context, pool, node string) (*apiv1.ListSlicesResponse, error) {
	var resp *apiv1.ListSlicesResponse
	err := e.callController(ctx, func(ctx context.Context, c apiv1.ControllerClient) (err error) {
		resp, err = c.ListSlices(ctx, &apiv1.ListSlicesRequest{Pool: pool, Node: node})
		return err
	})
	return resp, err
}

// callController runs call on a connection to the controller made as an
// agent makes it, and closes it.
func (e *Env) callController(ctx context.Context, call func(context.Context, apiv1.ControllerClient) error) error {
	tok, err := e.Node.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ReleaseName+"-agent", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{Audiences: []string{"slingshot-controller"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("agent token: %w", err)
	}
	sec, err := e.Node.Client.CoreV1().Secrets(Namespace).Get(ctx, ReleaseName+"-controller-tls", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("controller certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		return fmt.Errorf("controller certificate: no CA in %s", sec.Name)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(e.ControllerAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	return call(metadataWithToken(ctx, tok.Status.Token), apiv1.NewControllerClient(conn))
}

// Process is one process of a pod's containers, as the node sees it.
type Process struct {
	Pid   int
	Exe   string
	Netns string // the /proc/<pid>/ns/net link: "net:[4026532500]"
	Env   map[string]string
}

// ReportedServices are the services rep reports for the pod key
// ("namespace/name"): the device plugin names its services by the pod
// they serve.
func ReportedServices(rep *inspect.Report, key string) []inspect.Service {
	var out []inspect.Service
	for _, s := range rep.Services {
		if s.Pod == key {
			out = append(out, s)
		}
	}
	return out
}

// PodProcesses lists the processes in the cgroups of the pod with the
// given UID (the kubelet's cgroupfs layout: .../pod<uid>/<container>),
// pause included.
func PodProcesses(uid string) ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	needle := "/pod" + uid + "/"
	var out []Process
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", ent.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(needle)) {
			continue
		}
		p := Process{Pid: pid, Env: map[string]string{}}
		p.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
		p.Netns, _ = os.Readlink(filepath.Join(dir, "ns", "net"))
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			for kv := range bytes.SplitSeq(env, []byte{0}) {
				if k, v, ok := strings.Cut(string(kv), "="); ok {
					p.Env[k] = v
				}
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out, nil
}

// EnvFile reads a KEY=VALUE file in a process's root file system.
func EnvFile(pid int, path string) (map[string]string, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "root", path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// Describe summarises pods and recent events of every namespace, and the
// end of each node's kubelet's and agent's logs (and the controller's),
// for a failure message.
func (e *Env) Describe(ctx context.Context) string {
	var b strings.Builder
	c := e.Node.Client.CoreV1()
	if pods, err := c.Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		b.WriteString("pods:\n")
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  %s/%s %s node=%s %s\n", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName, containerStates(p))
		}
	}
	if evs, err := c.Events("").List(ctx, metav1.ListOptions{}); err == nil {
		b.WriteString("events (warnings):\n")
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", ev.LastTimestamp.Format("15:04:05"), ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	}
	e.describeClaims(ctx, &b)
	for _, ne := range e.Nodes() {
		fmt.Fprintf(&b, "--- %s kubelet log (end):\n%s\n", ne.Node.Name, node.TailFile(ne.Node.KubeletLog(), 20))
		for _, name := range []string{"agent", "controller"} {
			fmt.Fprintf(&b, "--- %s %s container log (end):\n%s\n", ne.Node.Name, name, ne.containerLog(name, 30))
		}
	}
	return b.String()
}

// containerLog reads the end of the newest log of a container of the
// release from the kubelet's pod log directory.
func (e *Env) containerLog(container string, lines int) string {
	matches, _ := filepath.Glob(filepath.Join(e.Node.LogDir, "pods", Namespace+"_*", container, "*.log"))
	if len(matches) == 0 {
		return "(none)"
	}
	sort.Strings(matches)
	var out []string
	for _, m := range matches {
		out = append(out, m+":\n"+node.TailFile(m, lines))
	}
	return strings.Join(out, "\n")
}

func containerStates(p corev1.Pod) string {
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			parts = append(parts, cs.Name+"=running")
		case cs.State.Waiting != nil:
			parts = append(parts, cs.Name+"=waiting:"+cs.State.Waiting.Reason+":"+cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			parts = append(parts, cs.Name+"=terminated:"+cs.State.Terminated.Reason)
		}
	}
	return strings.Join(parts, " ")
}

func metadataWithToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// VNIHolders are the nodes the controller records as holding vni, sorted;
// none when no lease carries it.
func (e *Env) VNIHolders(ctx context.Context, vni uint16) ([]string, error) {
	vnis, err := e.VNIs(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range vnis.Leases {
		if uint16(l.Vni) == vni {
			return slices.Sorted(slices.Values(l.Nodes)), nil
		}
	}
	return nil, nil
}

// AgentMemory is the agent process's resident set now and at its peak
// (VmRSS and VmHWM), in bytes, read from the node's /proc: the one
// process whose command name is slingshot-agent. anon is the part of rss
// that is heap, stacks and data (RssAnon), the rest mostly the binary's
// pages it has touched.
func AgentMemory() (rss, peak, anon int64, err error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, 0, 0, err
	}
	var found []string
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "slingshot-agent" {
			continue
		}
		found = append(found, d)
	}
	if len(found) != 1 {
		return 0, 0, 0, fmt.Errorf("%d slingshot-agent processes (%v), want one", len(found), found)
	}
	status, err := os.ReadFile(filepath.Join(found[0], "status"))
	if err != nil {
		return 0, 0, 0, err
	}
	field := func(name string) (int64, error) {
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				return kb * 1024, err
			}
		}
		return 0, fmt.Errorf("%s/status has no %s", found[0], name)
	}
	if rss, err = field("VmRSS"); err != nil {
		return 0, 0, 0, err
	}
	if peak, err = field("VmHWM"); err != nil {
		return 0, 0, 0, err
	}
	if anon, err = field("RssAnon"); err != nil {
		return 0, 0, 0, err
	}
	return rss, peak, anon, nil
}

// AgentCounter sums the agent's series of the counter (or histogram
// _count) name whose labels include every one of match, from its /metrics.
func (e *Env) AgentCounter(ctx context.Context, name string, match map[string]string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.InspectURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("agent metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("agent metrics: %w", err)
	}
	var sum float64
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !containsAll(labels, match) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, nil
}

func containsAll(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Readyz asks the agent's /readyz at its node address, as the kubelet's
// readiness probe does, and returns the status code and the body.
func (e *Env) Readyz(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.AgentURL+"/readyz", nil)
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("agent readyz: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("agent readyz: %w", err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}

// WaitReadyz waits (up to two minutes) until the agent's /readyz says
// ready (200) or not (any other status), as ready asks, with a body that
// contains says (when not ""), and returns the body.
func (e *Env) WaitReadyz(ctx context.Context, ready bool, says string) (string, error) {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, err := e.Readyz(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d %s", code, body)
		return (code == http.StatusOK) == ready && strings.Contains(body, says), nil
	})
	if err != nil {
		return "", fmt.Errorf("agent /readyz ready=%v saying %q: %w (last: %s)", ready, says, err, last)
	}
	return last, nil
}

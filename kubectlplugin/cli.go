package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	"github.com/slingshot-k8s/slingshot/internal/version"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are the flags every subcommand takes.
type Options struct {
	// Kubeconfig, Context and Namespace are kubectl's --kubeconfig,
	// --context and -n.
	Kubeconfig string
	Context    string
	Namespace  string
	// Output is "" (tables) or "json".
	Output string
	// SlingshotNamespace restricts where the controller's objects and
	// the agents are looked for; empty: every namespace.
	SlingshotNamespace string
	AgentSelector      string
	Timeout            time.Duration
	// Parallel bounds the agents inspected at once by nodes.
	Parallel int
}

// Connector makes the Cluster that o names, and returns the namespace
// of o's kubeconfig context (the default of pod's -n).
type Connector func(o *Options) (c *Cluster, contextNamespace string, err error)

// Command is kubectl-slingshot. Now and Connect are replaceable for
// tests.
type Command struct {
	Stdout, Stderr io.Writer
	Now            func() time.Time
	Connect        Connector
}

// ErrUsage marks bad arguments (exit code 2).
var ErrUsage = errors.New("usage")

// usageErr wraps err as a usage error.
func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

const rootHelp = `kubectl slingshot: Slingshot VNIs, pods and nodes of this cluster.

Usage:
  kubectl slingshot vnis [-n OWNER-NAMESPACE] [-o json]
  kubectl slingshot pod NAME [-n NAMESPACE] [-o json]
  kubectl slingshot nodes [-o json]

Commands:
  vnis    every job VNI lease (owner, VNI, scope, nodes holding it) and the VNIs in quarantine
  pod     one pod's VNI, NICs, CXI services per NIC and hsn address, from the agent on its node
  nodes   each node's agent (state and version), NIC health, services, free TLE pools, pod VNI pool and IP slices, and taints

"kubectl slingshot --version" prints the plugin's own version.

Run "kubectl slingshot COMMAND --help" for a command's flags and the RBAC it needs.
`

var subHelp = map[string]string{
	"vnis": `kubectl slingshot vnis: the controller's job VNI leases and the VNIs in quarantine.

Reads the VNILease and VNIQuarantine objects the controller keeps in its
namespace (controller.store=kube). Leases of every owner namespace are
listed unless -n names one. The NODES column shows the count and the first
names; -o json has them all.

Needs: list vnileases, vniquarantines and storejournals
(slingshot.hpe.com), cluster-wide or in --slingshot-namespace.

Usage:
  kubectl slingshot vnis [-n OWNER-NAMESPACE] [-o json]
`,
	"pod": `kubectl slingshot pod: one pod's VNI, NICs, CXI services (VNIs, traffic
classes, reservations), hardware collectives and hsn address.

Asks the slingshot agent on the pod's node (by running
"slingshot-agent inspect --json" in the agent's pod through the API
server's pods/exec, as kubectl exec does; the agent's /inspect endpoint is
loopback-only), and adds the controller's lease of the VNI (when the
controller keeps it in the Kubernetes API) and the pod's ResourceClaims.

Needs: get pods in the pod's namespace; list pods (the agents) and create
pods/exec in the agents' namespace; get resourceclaims (DRA); list
vnileases and storejournals (optional: without them the lease is left out
with a note).

Usage:
  kubectl slingshot pod NAME [-n NAMESPACE] [-o json]
`,
	"nodes": `kubectl slingshot nodes: each node's agent, NICs, services, pools and taints.

Asks every node's slingshot agent (pods/exec, as for "pod"), --parallel at
a time. A node whose agent cannot be asked shows "error" and the reason
below the table; a node without an agent shows "none". VERSION is the
agent's release ("-" for an agent older than 0.2.0, which reports none).

Needs: list nodes; list pods and create pods/exec in the agents' namespace.

Usage:
  kubectl slingshot nodes [-o json]
`,
}

// flags registers the common flags on fs.
func (o *Options) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.Context, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "pod: the pod's namespace (default: the context's); vnis: only leases of owners in this namespace")
	fs.StringVarP(&o.Output, "output", "o", "", `output format: "json", or tables when empty`)
	fs.StringVar(&o.SlingshotNamespace, "slingshot-namespace", "", "the namespace of the controller's objects and the agents (default: every namespace, which needs cluster-wide list rights)")
	fs.StringVar(&o.AgentSelector, "agent-selector", DefaultAgentSelector, "label selector of the agents' pods")
	fs.DurationVar(&o.Timeout, "request-timeout", 60*time.Second, "give up after this long")
	fs.IntVar(&o.Parallel, "parallel", 8, "nodes: agents asked at once")
}

// Run runs the command line args (without the program name). It returns
// an error wrapping ErrUsage for bad arguments, and nil for --help.
func (c *Command) Run(ctx context.Context, args []string) error {
	var o Options
	root := pflag.NewFlagSet("kubectl slingshot", pflag.ContinueOnError)
	// Help goes to stdout, errors come back to main: pflag prints
	// neither.
	root.SetOutput(io.Discard)
	root.Usage = func() {}
	o.flags(root)
	// Root only: "kubectl slingshot --version" is the plugin's, not an
	// agent's (nodes shows those).
	showVersion := root.Bool("version", false, "print the plugin's version, commit, build date and Go version, and exit")
	// The subcommand may follow global flags (kubectl slingshot -n ns pod
	// x): the root parse stops at it, and the subcommand's parse, over the
	// same Options, takes the rest.
	root.SetInterspersed(false)
	if err := root.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			_, err := fmt.Fprint(c.Stdout, rootHelp, "\nFlags:\n", root.FlagUsages())
			return err
		}
		return usageErr("%v (see kubectl slingshot --help)", err)
	}
	if *showVersion {
		_, err := fmt.Fprint(c.Stdout, version.Get().String("kubectl-slingshot"))
		return err
	}
	if root.NArg() == 0 {
		return usageErr("no command: vnis, pod or nodes (see kubectl slingshot --help)")
	}
	name := root.Arg(0)
	help, ok := subHelp[name]
	if !ok {
		return usageErr("unknown command %q (vnis, pod, nodes)", name)
	}
	sub := pflag.NewFlagSet("kubectl slingshot "+name, pflag.ContinueOnError)
	sub.SetOutput(io.Discard)
	sub.Usage = func() {}
	// Register on sub without resetting what the root parse set.
	saved := o
	o.flags(sub)
	o = saved
	if err := sub.Parse(root.Args()[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			_, err := fmt.Fprint(c.Stdout, help, "\nFlags:\n", sub.FlagUsages())
			return err
		}
		return usageErr("%v (see kubectl slingshot %s --help)", err, name)
	}
	if o.Output != "" && o.Output != "json" {
		return usageErr("-o %q: only json is supported (or no -o, for tables)", o.Output)
	}
	if o.Parallel < 1 {
		return usageErr("--parallel %d: must be at least 1", o.Parallel)
	}
	var podName string
	switch {
	case name == "pod" && sub.NArg() != 1:
		return usageErr("pod takes one pod name, got %d arguments", sub.NArg())
	case name == "pod":
		podName = sub.Arg(0)
	case sub.NArg() != 0:
		return usageErr("%s takes no arguments, got %q", name, sub.Args())
	}

	cl, ctxNS, err := c.Connect(&o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	switch name {
	case "vnis":
		return c.vnis(ctx, cl, &o)
	case "pod":
		ns := o.Namespace
		if ns == "" {
			ns = ctxNS
		}
		return c.pod(ctx, cl, &o, ns, podName)
	default:
		return c.nodes(ctx, cl, &o)
	}
}

func (c *Command) vnis(ctx context.Context, cl *Cluster, o *Options) error {
	leases, err := cl.Leases(ctx, o.Namespace)
	if err != nil {
		return err
	}
	var quarantine []Quarantine
	if o.Namespace == "" {
		// A quarantined VNI has no owner: shown only when no owner
		// namespace is asked for.
		if quarantine, err = cl.Quarantines(ctx); err != nil {
			return err
		}
	}
	if len(leases) == 0 && len(quarantine) == 0 {
		// Empty lists say nothing when no controller writes them.
		ok, err := cl.HasStore(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("vnis %s: %w", cl.where(), ErrNoStore)
		}
	}
	v := BuildVNIs(leases, quarantine)
	if o.Output == "json" {
		return WriteJSON(c.Stdout, v)
	}
	return WriteVNIs(c.Stdout, v, c.Now())
}

func (c *Command) pod(ctx context.Context, cl *Cluster, o *Options, ns, name string) error {
	p, err := cl.Pod(ctx, ns, name)
	if err != nil {
		return err
	}
	if p.Spec.NodeName == "" {
		return fmt.Errorf("pod %s/%s is not scheduled to a node yet: %w", ns, name, ErrNotServed)
	}
	agent, err := cl.AgentOn(ctx, p.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	rep, err := cl.Inspector.Inspect(ctx, agent)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	claims, err := cl.ResourceClaims(ctx, p)
	if err != nil {
		return err
	}
	leases, note := cl.leasesForPod(ctx)
	v, err := BuildPod(p, agent, rep, leases, claims)
	if err != nil {
		return err
	}
	if note != "" {
		v.Notes = append(v.Notes, note)
	}
	if o.Output == "json" {
		return WriteJSON(c.Stdout, v)
	}
	return WritePod(c.Stdout, v)
}

func (c *Command) nodes(ctx context.Context, cl *Cluster, o *Options) error {
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return err
	}
	pods, err := cl.Agents(ctx, "")
	if err != nil {
		return err
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	agents := map[string]*corev1.Pod{}
	reports := map[string]*inspect.Report{}
	errs := map[string]error{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallel)
	for _, n := range nodes {
		ps := byNode[n.Name]
		if len(ps) == 0 {
			continue
		}
		a := pickAgent(ps)
		if a == nil {
			mu.Lock()
			agents[n.Name] = &ps[0]
			errs[n.Name] = fmt.Errorf("agent pod %s/%s is %s", ps[0].Namespace, ps[0].Name, ps[0].Status.Phase)
			mu.Unlock()
			continue
		}
		g.Go(func() error {
			// One node's failure is that node's row, not the command's.
			r, err := cl.Inspector.Inspect(gctx, a)
			mu.Lock()
			defer mu.Unlock()
			agents[n.Name] = a
			if err != nil {
				errs[n.Name] = err
			} else {
				reports[n.Name] = r
			}
			return nil
		})
	}
	_ = g.Wait()
	views := BuildNodes(nodes, agents, reports, errs)
	if o.Output == "json" {
		return WriteJSON(c.Stdout, views)
	}
	return WriteNodes(c.Stdout, views)
}

// Connect is the Connector of the real command: the user's kubeconfig,
// resolved as kubectl resolves it, and exec to reach the agents.
func Connect(o *Options) (*Cluster, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "kubectl-slingshot"
	}
	// kubectl's own client-side limits, not client-go's default of 5 per
	// second: nodes asks many agents at once.
	cfg.QPS, cfg.Burst = 50, 300
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return &Cluster{Client: cs, Inspector: &ExecInspector{Config: cfg, Client: cs},
		Namespace: o.SlingshotNamespace, AgentSelector: o.AgentSelector}, ns, nil
}

package kubectlplugin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/inspect"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// The errors a command can return, each wrapped with what it concerns.
var (
	// ErrNoCRDs: the API server does not serve the store's resources.
	ErrNoCRDs = errors.New("the Slingshot CRDs are not installed (install the chart, or kubectl apply -f deploy/crds/)")
	// ErrForbidden: RBAC refused a read the command needs.
	ErrForbidden = errors.New("permission denied (bind the ClusterRole slingshot-viewer, see docs/operations.md)")
	// ErrNoStore: no controller keeps its leases in the Kubernetes API.
	ErrNoStore = errors.New("no controller keeps its leases in the Kubernetes API (no StoreJournal found): the controller's store is sqlite (controller.store=sqlite, the chart's default) or the controller is off; `kubectl slingshot pod` and `nodes` still show what the agents hold")
	// ErrPodNotFound: no such pod.
	ErrPodNotFound = errors.New("pod not found")
	// ErrNoAgent: no running slingshot agent on the pod's node.
	ErrNoAgent = errors.New("no slingshot agent")
	// ErrNotServed: the pod holds no Slingshot NIC on its node.
	ErrNotServed = errors.New("the agent serves no Slingshot NIC to this pod")
)

// Store resources (controller/store/kube, deploy/crds).
const (
	storeGroupVersion = "slingshot.hpe.com/v1alpha1"
	leaseResource     = "vnileases"
	quarantineRes     = "vniquarantines"
	journalResource   = "storejournals"
)

// DefaultAgentSelector selects the agent pods the chart makes (its
// selector labels, deploy/helm/slingshot/templates/_helpers.tpl).
const DefaultAgentSelector = "app.kubernetes.io/name=slingshot,app.kubernetes.io/component=agent"

// Lease is a VNILease object: one job VNI leased to one owner, as the
// controller's Kubernetes store writes it.
type Lease struct {
	// Namespace is the controller's namespace, where the object lives.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	VNI       uint16 `json:"vni"`
	// Scope is job, pod or claim.
	Scope string `json:"scope"`
	Key   string `json:"leaseKey"`
	Owner Owner  `json:"owner"`
	// Nodes hold the VNI now.
	Nodes []string `json:"nodes"`
	// OwnerGone: the owner is deleted; the VNI is freed once no node
	// holds it.
	OwnerGone bool      `json:"ownerGone"`
	Created   time.Time `json:"created,omitzero"`
}

// Owner is a lease's owner: a job-like object, a pod or a VNIClaim.
type Owner struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	UID        string `json:"uid,omitempty"`
}

// Quarantine is a VNIQuarantine object: a freed VNI not handed out again
// before the controller's --quarantine has passed since Released.
type Quarantine struct {
	Namespace string    `json:"namespace"`
	VNI       uint16    `json:"vni"`
	Released  time.Time `json:"released,omitzero"`
}

// The objects' JSON, as deploy/crds declares it. Only what the views
// show is decoded.
type leaseObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		VNI      uint16 `json:"vni"`
		Scope    string `json:"scope"`
		LeaseKey string `json:"leaseKey"`
		Owner    Owner  `json:"owner"`
		Created  string `json:"created"`
	} `json:"spec"`
	Status struct {
		Nodes     []string `json:"nodes"`
		OwnerGone bool     `json:"ownerGone"`
	} `json:"status"`
}

type quarantineObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		VNI      uint16 `json:"vni"`
		Released string `json:"released"`
	} `json:"spec"`
}

type objectList[T any] struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []T `json:"items"`
}

// Inspector gets the report of the agent that runs as pod agent.
type Inspector interface {
	Inspect(ctx context.Context, agent *corev1.Pod) (*inspect.Report, error)
}

// Cluster reads the cluster through the API server. It is safe for
// concurrent use.
type Cluster struct {
	Client kubernetes.Interface
	// Inspector gets the agents' reports.
	Inspector Inspector
	// Namespace, if set, is where the controller's objects and the agents
	// are looked for; empty: every namespace (which needs cluster-wide
	// list rights).
	Namespace string
	// AgentSelector selects the agents' pods (DefaultAgentSelector).
	AgentSelector string
}

// list pages through resource of the store's group, in c.Namespace or
// every namespace, with an optional field selector.
func list[T any](ctx context.Context, c *Cluster, resource, fieldSelector string, add func(*T)) error {
	path := "/apis/" + storeGroupVersion + "/" + resource
	if c.Namespace != "" {
		path = "/apis/" + storeGroupVersion + "/namespaces/" + c.Namespace + "/" + resource
	}
	cont := ""
	for {
		req := c.Client.CoreV1().RESTClient().Get().AbsPath(path).Param("limit", "500")
		if fieldSelector != "" {
			req = req.Param("fieldSelector", fieldSelector)
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		raw, err := req.DoRaw(ctx)
		if err != nil {
			return c.apiError(err, "list", resource+".slingshot.hpe.com")
		}
		var page objectList[T]
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decode %s: %w", resource, err)
		}
		for i := range page.Items {
			add(&page.Items[i])
		}
		if cont = page.Metadata.Continue; cont == "" {
			return nil
		}
	}
}

// where names the namespaces a list covers, for errors.
func (c *Cluster) where() string {
	if c.Namespace == "" {
		return "in all namespaces"
	}
	return "in namespace " + c.Namespace
}

// apiError turns the API server's refusals into the package's errors,
// keeping the server's message.
func (c *Cluster) apiError(err error, verb, what string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s %s %s: %w: %w", verb, what, c.where(), ErrForbidden, err)
	case apierrors.IsNotFound(err) && isStoreResource(what):
		// A list answers 404 only when the resource is not served.
		return fmt.Errorf("%s %s: %w", verb, what, ErrNoCRDs)
	}
	return fmt.Errorf("%s %s %s: %w", verb, what, c.where(), err)
}

func isStoreResource(what string) bool {
	for _, r := range []string{leaseResource, quarantineRes, journalResource} {
		if what == r+".slingshot.hpe.com" {
			return true
		}
	}
	return false
}

// Leases lists the VNILeases; ownerNamespace, if set, keeps the leases
// of owners in that namespace (a field selector the CRD declares).
func (c *Cluster) Leases(ctx context.Context, ownerNamespace string) ([]Lease, error) {
	sel := ""
	if ownerNamespace != "" {
		sel = fields.OneTermEqualSelector("spec.owner.namespace", ownerNamespace).String()
	}
	out := []Lease{}
	var bad error
	err := list(ctx, c, leaseResource, sel, func(o *leaseObject) {
		created, err := parseTime(o.Spec.Created)
		if err != nil {
			bad = errors.Join(bad, fmt.Errorf("vnilease %s/%s: spec.created: %w", o.Metadata.Namespace, o.Metadata.Name, err))
		}
		out = append(out, Lease{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, VNI: o.Spec.VNI, Scope: o.Spec.Scope,
			Key: o.Spec.LeaseKey, Owner: o.Spec.Owner, Nodes: o.Status.Nodes, OwnerGone: o.Status.OwnerGone, Created: created})
	})
	if err != nil {
		return nil, err
	}
	return out, bad
}

// Quarantines lists the VNIQuarantines.
func (c *Cluster) Quarantines(ctx context.Context) ([]Quarantine, error) {
	var out []Quarantine
	var bad error
	err := list(ctx, c, quarantineRes, "", func(o *quarantineObject) {
		rel, err := parseTime(o.Spec.Released)
		if err != nil {
			bad = errors.Join(bad, fmt.Errorf("vniquarantine %s/%s: spec.released: %w", o.Metadata.Namespace, o.Metadata.Name, err))
		}
		out = append(out, Quarantine{Namespace: o.Metadata.Namespace, VNI: o.Spec.VNI, Released: rel})
	})
	if err != nil {
		return nil, err
	}
	return out, bad
}

// HasStore reports whether a controller keeps its leases in the
// Kubernetes API: its store's head, a StoreJournal, exists. Without one
// an empty lease list means nothing.
func (c *Cluster) HasStore(ctx context.Context) (bool, error) {
	found := false
	err := list(ctx, c, journalResource, "", func(*metav1.PartialObjectMetadata) { found = true })
	return found, err
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// Pod gets a pod.
func (c *Cluster) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrPodNotFound)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("get pod %s/%s: %w: %w", namespace, name, ErrForbidden, err)
	case err != nil:
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

// Agents lists the agents' pods, on node only when node is set.
func (c *Cluster) Agents(ctx context.Context, node string) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: c.AgentSelector}
	if node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	l, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, opts)
	if err != nil {
		return nil, c.apiError(err, "list", "agent pods ("+c.AgentSelector+")")
	}
	return l.Items, nil
}

// AgentOn returns the running agent pod on node. Of several (a rollout),
// the newest running one answers.
func (c *Cluster) AgentOn(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := c.Agents(ctx, node)
	if err != nil {
		return nil, err
	}
	p := pickAgent(pods)
	if p == nil {
		if len(pods) == 0 {
			return nil, fmt.Errorf("%w on node %s (no pod %s, %s)", ErrNoAgent, node, c.AgentSelector, c.where())
		}
		return nil, fmt.Errorf("%w running on node %s (agent pod %s/%s is %s)", ErrNoAgent, node, pods[0].Namespace, pods[0].Name, pods[0].Status.Phase)
	}
	return p, nil
}

// pickAgent returns the newest running, undeleted pod of pods, or nil.
func pickAgent(pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) {
			best = p
		}
	}
	return best
}

// Nodes lists the nodes.
func (c *Cluster) Nodes(ctx context.Context) ([]corev1.Node, error) {
	l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("list nodes: %w: %w", ErrForbidden, err)
		}
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return l.Items, nil
}

// ResourceClaims gets the ResourceClaims pod's status names. A claim
// that is gone is left out; a refusal is an error.
func (c *Cluster) ResourceClaims(ctx context.Context, pod *corev1.Pod) ([]resourcev1.ResourceClaim, error) {
	var out []resourcev1.ResourceClaim
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		rc, err := c.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("get resourceclaim %s/%s: %w: %w", pod.Namespace, *s.ResourceClaimName, ErrForbidden, err)
		case err != nil:
			return nil, fmt.Errorf("get resourceclaim %s/%s: %w", pod.Namespace, *s.ResourceClaimName, err)
		}
		out = append(out, *rc)
	}
	return out, nil
}

// leasesForPod lists the leases, for the pod view. The leases only add
// the owner and the holding nodes to what the agent tells, so a cluster
// without the Kubernetes store, or a user without rights to it, still
// gets the agent's view: the reason comes back as a note.
func (c *Cluster) leasesForPod(ctx context.Context) ([]Lease, string) {
	ls, err := c.Leases(ctx, "")
	switch {
	case err != nil:
		return nil, "controller lease not read: " + err.Error()
	case len(ls) == 0:
		if ok, err := c.HasStore(ctx); err == nil && !ok {
			return nil, "controller lease not shown: the controller's store is not the Kubernetes API"
		}
	}
	return ls, ""
}

// sortLeases orders leases by VNI, then key.
func sortLeases(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.VNI, b.VNI), strings.Compare(a.Key, b.Key))
	})
}

func itoa(v uint16) string { return strconv.Itoa(int(v)) }

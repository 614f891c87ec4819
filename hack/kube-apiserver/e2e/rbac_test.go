package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// haManifest is the chart rendered for a highly available controller
// (store kube, three replicas, leader election), as `make manifests`
// writes it for `kubectl apply -f deploy/manifests/ha/`.
const haManifest = "../../../deploy/manifests/ha/slingshot.yaml"

// controllerName names the chart's ServiceAccount and Role, the Lease the
// controller elects on (cmd/slingshot-controller) and the store's head
// (kube.Options.Name's default).
const controllerName = "slingshot-controller"

// TestRBACHighAvailability applies the ServiceAccount and RBAC of the
// highly available plain manifests to a fresh namespace and runs, with
// that ServiceAccount's token alone: the kube store through creates,
// updates and deletes of every kind, a batch large enough for journal
// parts and a second writer's Load; the leader election on the
// controller's Lease; two slingshot-controller replicas. It checks that
// the Role grants nothing they do not use, and that without "delete" the
// store fails Forbidden, as do a Lease and a store head of another name.
func TestRBACHighAvailability(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "rbac")
	role := applyControllerRBAC(t, ns)
	user := "system:serviceaccount:" + ns + ":" + controllerName
	waitAccess(t, user, authzv1.ResourceAttributes{Namespace: ns, Verb: "list", Group: "slingshot.hpe.com", Resource: "vnileases"}, true)
	waitAccess(t, user, authzv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "pods", Name: "x"}, true)

	tok, err := kubeClient(t).CoreV1().ServiceAccounts(ns).CreateToken(ctx, controllerName, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tok.Status.Token
	sa := newClient(t, tokenConfig(token))
	if _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount lists secrets: %v; want Forbidden (is the client admin?)", err)
	}
	// The ClusterRole lets the controller authenticate agents.
	review, err := sa.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated || review.Status.User.Username != user {
		t.Fatalf("TokenReview as the ServiceAccount: %v, %+v", err, review)
	}

	// The store and the election, every request recorded.
	rec := &recorder{}
	cfg := tokenConfig(token)
	cfg.WrapTransport = rec.wrap
	t.Run("store", func(t *testing.T) {
		if err := exerciseStore(t.Context(), cfg, ns, "rbac-a", 2500); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(rec.list(), func(c apiCall) bool {
			return c.verb == "delete" && c.resource == kube.JournalResource.Resource && strings.HasPrefix(c.name, controllerName+"-part-")
		}) {
			t.Error("no journal part was deleted: the batch was not large enough for parts")
		}
	})
	t.Run("election", func(t *testing.T) {
		exerciseElection(t, newClient(t, cfg), ns, leaseName(t, role))
	})
	t.Run("the Role grants what they use, no more", func(t *testing.T) {
		calls := rec.list()
		refused := map[string]int{}
		for _, c := range calls {
			if c.code == http.StatusForbidden || c.code == http.StatusUnauthorized {
				refused[fmt.Sprintf("%s: %d", c, c.code)]++
			}
		}
		for c, n := range refused {
			t.Errorf("%s (%d times)", c, n)
		}
		for _, g := range grants(role.Rules) {
			if !slices.ContainsFunc(calls, g.allows) {
				t.Errorf("the Role grants %s, which neither the store nor the election used", g)
			}
		}
		t.Logf("%d requests of the store and the election", len(calls))
	})
	t.Run("controller replicas", func(t *testing.T) {
		controllerReplicas(t, ns, token)
	})
	t.Run("another name is forbidden", func(t *testing.T) {
		ctx := t.Context()
		other := &metav1.ObjectMeta{Name: "other", Namespace: ns}
		if _, err := kubeClient(t).CoordinationV1().Leases(ns).Create(ctx, leaseObject(other), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := sa.CoordinationV1().Leases(ns).Get(ctx, other.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get Lease %s: %v; want Forbidden", other.Name, err)
		}
		if _, err := sa.CoordinationV1().Leases(ns).Update(ctx, leaseObject(other), metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("update Lease %s: %v; want Forbidden", other.Name, err)
		}
		st, err := kube.New(tokenConfig(token), kube.Options{Namespace: ns, Name: "other", Identity: "rbac-other"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Load(ctx); !apierrors.IsForbidden(err) {
			t.Errorf("load a store whose head is %q: %v; want Forbidden", "other", err)
		}
	})
	t.Run("without delete", func(t *testing.T) {
		ctx := t.Context()
		broken := role.DeepCopy()
		for i, r := range broken.Rules {
			if slices.Contains(r.Resources, "vnileases") {
				broken.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "delete" })
			}
		}
		if _, err := kubeClient(t).RbacV1().Roles(ns).Update(ctx, broken, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAccess(t, user, authzv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "slingshot.hpe.com", Resource: "vnileases", Name: "x"}, false)
		rec := &recorder{}
		cfg := tokenConfig(token)
		cfg.WrapTransport = rec.wrap
		err := exerciseStore(ctx, cfg, ns, "rbac-b", 10)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("store without delete: %v; want Forbidden", err)
		}
		for _, c := range rec.list() {
			if c.code == http.StatusForbidden && c.verb != "delete" {
				t.Errorf("%s forbidden; want only deletes", c)
			}
		}
		t.Logf("store without delete: %v", err)
	})
}

// applyControllerRBAC creates the ServiceAccount, ClusterRole,
// ClusterRoleBinding, Role and RoleBinding of the highly available plain
// manifests in namespace ns (the cluster-scoped ones renamed for ns), and
// returns the Role as created.
func applyControllerRBAC(t *testing.T, ns string) *rbacv1.Role {
	t.Helper()
	ctx := t.Context()
	cs := kubeClient(t)
	data, err := os.ReadFile(haManifest)
	if err != nil {
		t.Fatalf("%v (make manifests writes it)", err)
	}
	clusterName := controllerName + "-" + ns
	var role *rbacv1.Role
	var kinds []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		// The manifests hold others' roles too (the agent's, kubectl
		// slingshot's viewer): the controller's are named for it.
		var named struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &named); err != nil {
			t.Fatal(err)
		}
		if named.Metadata.Name != controllerName {
			continue
		}
		switch meta.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			decodeStrict(t, doc, &o)
			o.Namespace = ns
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			decodeStrict(t, doc, &o)
			o.Name = clusterName
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			decodeStrict(t, doc, &o)
			o.Name, o.RoleRef.Name = clusterName, clusterName
			rebindSubjects(t, o.Subjects, ns)
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			decodeStrict(t, doc, &o)
			o.Namespace = ns
			role, err = cs.RbacV1().Roles(ns).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			decodeStrict(t, doc, &o)
			o.Namespace = ns
			rebindSubjects(t, o.Subjects, ns)
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("create %s: %v", meta.Kind, err)
		}
		kinds = append(kinds, meta.Kind)
	}
	slices.Sort(kinds)
	if want := []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}; !slices.Equal(kinds, want) {
		t.Fatalf("%s has the controller's %v, want %v", haManifest, kinds, want)
	}
	return role
}

// rebindSubjects points the controller's ServiceAccount subjects at ns.
func rebindSubjects(t *testing.T, subjects []rbacv1.Subject, ns string) {
	t.Helper()
	for i, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind || s.Name != controllerName {
			t.Fatalf("binding to %+v, want the ServiceAccount %s", s, controllerName)
		}
		subjects[i].Namespace = ns
	}
}

func decodeStrict(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatal(err)
	}
}

// leaseName returns the one Lease name the Role lets the controller read,
// which must be the one it elects on.
func leaseName(t *testing.T, role *rbacv1.Role) string {
	t.Helper()
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) > 0 {
			if !slices.Equal(r.ResourceNames, []string{controllerName}) {
				t.Fatalf("the Role names Leases %v; the controller elects on %s", r.ResourceNames, controllerName)
			}
			return r.ResourceNames[0]
		}
	}
	t.Fatal("the Role names no Lease")
	return ""
}

// waitAccess waits until the API server's authorizer, which learns of RBAC
// changes through a watch, allows (or denies) user attrs.
func waitAccess(t *testing.T, user string, attrs authzv1.ResourceAttributes, allowed bool) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s %s %+v: allowed=%v", user, attrs.Verb, attrs, allowed), func() (bool, string) {
		r, err := kubeClient(t).AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed == allowed, fmt.Sprintf("allowed=%v %s", r.Status.Allowed, r.Status.Reason)
	})
}

// tokenConfig reaches the test API server with token alone.
func tokenConfig(token string) *rest.Config {
	return &rest.Config{Host: srv.Config.Host, BearerToken: token, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: time.Minute}
}

func newClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func leaseObject(m *metav1.ObjectMeta) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: *m.DeepCopy()}
}

// exerciseStore runs the kube store in ns as identity id through every
// kind of write: a create, an update and a delete of a lease, a node
// slice, a quarantined VNI and a meta record, a batch of many leases (2500
// take journal parts) and their deletes; then a second writer loads (the
// fence) and must find nothing left.
func exerciseStore(ctx context.Context, cfg *rest.Config, ns, id string, many int) error {
	st, err := kube.New(cfg, kube.Options{Namespace: ns, Identity: id})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Load(ctx); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	records := func(gen int) []store.Record {
		nodes := []string{"node-a"}
		if gen > 0 {
			nodes = append(nodes, "node-b")
		}
		return []store.Record{lease("job/ns/"+id, 4000, nodes...),
			&store.Slice{Pool: "pod-vni", Index: 0, Node: "node-a", Expires: now.Add(time.Minute), Allocated: gen, Reported: now},
			&store.Quarantine{VNI: 4001, Released: now.Add(time.Duration(gen) * time.Second)},
			&store.Meta{Key: "rbac-" + id, Value: fmt.Sprint(gen)}}
	}
	each := func(op func(store.Record, uint64) store.Op, rs []store.Record, expect uint64) []store.Op {
		ops := make([]store.Op, 0, len(rs))
		for _, r := range rs {
			ops = append(ops, op(r, expect))
		}
		return ops
	}
	// VNIs 21024 and up: clear of the ones the controller replicas lease
	// (from 1024) before the last run of this.
	batch := leaseOps(many, 20000)
	var batchDeletes []store.Op
	for _, op := range batch {
		batchDeletes = append(batchDeletes, store.Delete(op.Record, 1))
	}
	steps := []struct {
		name string
		ops  []store.Op
	}{
		{"create one of each kind", each(store.Put, records(0), 0)},
		{"update one of each kind", each(store.Put, records(1), 1)},
		{fmt.Sprintf("create %d leases", many), batch},
		{fmt.Sprintf("delete %d leases", many), batchDeletes},
		{"delete one of each kind", each(store.Delete, records(1), 2)},
	}
	for _, s := range steps {
		if err := st.Commit(ctx, s.ops); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	next, err := kube.New(cfg, kube.Options{Namespace: ns, Identity: id + "-next"})
	if err != nil {
		return err
	}
	defer next.Close()
	state, err := next.Load(ctx)
	if err != nil {
		return fmt.Errorf("second load: %w", err)
	}
	if n := len(state.Leases) + len(state.Slices) + len(state.Quarantine) + len(state.Meta); n != 0 {
		return fmt.Errorf("second load: %d records left, want none: %+v", n, state)
	}
	return nil
}

// exerciseElection runs two electors on Lease name: a leads (creating the
// Lease), b waits; a stops and releases it; b takes it over.
func exerciseElection(t *testing.T, cs kubernetes.Interface, ns, name string) {
	led := make(chan string, 2)
	run := func(ctx context.Context, id string) <-chan error {
		e, err := leader.New(cs.CoordinationV1(), leader.Config{Namespace: ns, Name: name, Identity: id,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(ctx context.Context) error {
				led <- id
				<-ctx.Done()
				return nil
			})
		}()
		return done
	}
	ctxA, stopA := context.WithCancel(t.Context())
	defer stopA()
	doneA := run(ctxA, "rbac-a")
	if id := waitFor(t, led, 30*time.Second); id != "rbac-a" {
		t.Fatalf("%s leads, want rbac-a", id)
	}
	ctxB, stopB := context.WithCancel(t.Context())
	defer stopB()
	doneB := run(ctxB, "rbac-b")
	stopA()
	if err := waitFor(t, doneA, 30*time.Second); err != nil {
		t.Fatalf("rbac-a: %v", err)
	}
	if id := waitFor(t, led, 30*time.Second); id != "rbac-b" {
		t.Fatalf("%s leads after rbac-a stopped, want rbac-b", id)
	}
	stopB()
	if err := waitFor(t, doneB, 30*time.Second); err != nil {
		t.Fatalf("rbac-b: %v", err)
	}
}

// controllerReplicas runs two slingshot-controller replicas with the
// ServiceAccount's token: one leads and serves (an acquire for a pod
// walks the pod's owners with the ClusterRole and commits with the Role),
// the other answers Unavailable, and neither logs a forbidden request.
func controllerReplicas(t *testing.T, ns, token string) {
	ctx := t.Context()
	kc := writeTokenKubeconfig(t, token)
	var logs lockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica logs:\n%s", logs.String())
		}
	})
	reps := []*replica{startReplica(t, ns, "rbac-r0", kc, &logs), startReplica(t, ns, "rbac-r1", kc, &logs)}
	var leaderRep, follower *replica
	eventually(t, time.Minute, "one replica serves", func() (bool, string) {
		var serving []*replica
		last := ""
		for _, r := range reps {
			_, err := r.client.ListVNIs(ctx, &apiv1.ListVNIsRequest{})
			switch status.Code(err) {
			case codes.OK:
				serving = append(serving, r)
			case codes.Unavailable:
				last = r.id + ": " + err.Error()
			default:
				t.Fatalf("%s: %v", r.id, err)
			}
		}
		if len(serving) > 1 {
			t.Fatalf("both replicas serve")
		}
		if len(serving) == 1 {
			leaderRep = serving[0]
			follower = reps[0]
			if follower == leaderRep {
				follower = reps[1]
			}
			return true, ""
		}
		return false, last
	})
	l, err := kubeClient(t).CoordinationV1().Leases(ns).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != leaderRep.id {
		t.Fatalf("Lease %s: %+v, %v; want held by %s", controllerName, l, err, leaderRep.id)
	}
	podNS := newNamespace(t, "rbac-pods")
	pods, uids := createPods(t, podNS, 1)
	got, err := leaderRep.client.AcquireJobVNI(ctx, &apiv1.AcquireJobVNIRequest{
		Pod: &apiv1.PodRef{Namespace: podNS, Name: pods[0], Uid: uids[0]}, Node: "node-a"})
	if err != nil || got.GetVni() == 0 {
		t.Fatalf("acquire from the leader %s: %v, %v", leaderRep.id, got, err)
	}
	if _, err := follower.client.ListVNIs(ctx, &apiv1.ListVNIsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("follower %s: %v; want Unavailable", follower.id, err)
	}
	t.Logf("%s leads and leased VNI %d; %s follows", leaderRep.id, got.GetVni(), follower.id)
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("log: %s", line)
		}
	}
}

// apiCall is one request to the API server, in RBAC's terms.
type apiCall struct {
	verb, group, resource, name string
	code                        int
}

func (c apiCall) String() string {
	return fmt.Sprintf("%s %s/%s %q", c.verb, c.group, c.resource, c.name)
}

// recorder records a client's requests and their status codes.
type recorder struct {
	mu    sync.Mutex
	calls []apiCall
}

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil {
			if c, ok := parseCall(req); ok {
				c.code = resp.StatusCode
				r.mu.Lock()
				r.calls = append(r.calls, c)
				r.mu.Unlock()
			}
		}
		return resp, err
	})
}

func (r *recorder) list() []apiCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// parseCall names a resource request as RBAC's authorizer does:
// /api/v1/... or /apis/GROUP/VERSION/..., then [namespaces/NS/]RESOURCE
// [/NAME[/SUBRESOURCE]], and the verb from the method.
func parseCall(req *http.Request) (apiCall, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var c apiCall
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		c.group, parts = parts[1], parts[3:]
	default:
		return c, false
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	c.resource = parts[0]
	if len(parts) > 1 {
		c.name = parts[1]
	}
	if len(parts) > 2 {
		c.resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case c.name != "":
			c.verb = "get"
		case req.URL.Query().Get("watch") == "true":
			c.verb = "watch"
		default:
			c.verb = "list"
		}
	case http.MethodPost:
		c.verb = "create"
	case http.MethodPut:
		c.verb = "update"
	case http.MethodPatch:
		c.verb = "patch"
	case http.MethodDelete:
		c.verb = "delete"
		if c.name == "" {
			c.verb = "deletecollection"
		}
	default:
		return c, false
	}
	return c, true
}

// grant is one verb on one resource (and one name, if named) of a rule.
type grant struct{ verb, group, resource, name string }

func (g grant) String() string {
	if g.name == "" {
		return fmt.Sprintf("%s %s/%s", g.verb, g.group, g.resource)
	}
	return fmt.Sprintf("%s %s/%s %q", g.verb, g.group, g.resource, g.name)
}

// allows reports whether g allows c, and c was authorized.
func (g grant) allows(c apiCall) bool {
	return c.code != http.StatusForbidden && c.code != http.StatusUnauthorized &&
		g.verb == c.verb && g.group == c.group && g.resource == c.resource && (g.name == "" || g.name == c.name)
}

// grants expands rules into single grants.
func grants(rules []rbacv1.PolicyRule) []grant {
	var out []grant
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					for _, name := range names {
						out = append(out, grant{verb, group, res, name})
					}
				}
			}
		}
	}
	return out
}

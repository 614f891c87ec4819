package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// draManifest is the chart rendered with api=dra, as `make manifests`
// writes it for `kubectl apply -f deploy/manifests/dra/`.
const draManifest = "../../../deploy/manifests/dra/slingshot.yaml"

// agentName names the chart's agent ServiceAccount, its ClusterRole and
// (with a suffix) its ValidatingAdmissionPolicy, in release "slingshot".
const agentName = "slingshot-agent"

// applyAgentSlicePolicy applies the agent's ServiceAccount, ClusterRole,
// binding and ResourceSlice policy of the DRA plain manifests, for the
// ServiceAccount in ns (the policy's user rewritten from the release
// namespace to ns); the cluster-wide objects get ns in their names and
// are deleted at the end.
func applyAgentSlicePolicy(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	cs := kubeClient(t)
	data, err := os.ReadFile(draManifest)
	if err != nil {
		t.Fatalf("%v (make manifests writes it)", err)
	}
	suffix := "-" + ns
	var applied []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(meta.Metadata.Name, agentName) {
			continue // the controller's
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
			o.Name += suffix
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			decodeStrict(t, doc, &o)
			o.Name += suffix
			o.RoleRef.Name += suffix
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case "ValidatingAdmissionPolicy":
			var o admissionv1.ValidatingAdmissionPolicy
			decodeStrict(t, doc, &o)
			o.Name += suffix
			user := `"system:serviceaccount:slingshot:` + agentName + `"`
			for i, c := range o.Spec.MatchConditions {
				if !strings.Contains(c.Expression, user) {
					t.Fatalf("policy's match condition %q names no %s", c.Expression, user)
				}
				o.Spec.MatchConditions[i].Expression = strings.ReplaceAll(c.Expression, user, `"system:serviceaccount:`+ns+`:`+agentName+`"`)
			}
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case "ValidatingAdmissionPolicyBinding":
			var o admissionv1.ValidatingAdmissionPolicyBinding
			decodeStrict(t, doc, &o)
			o.Name += suffix
			o.Spec.PolicyName += suffix
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("apply %s %s: %v", meta.Kind, meta.Metadata.Name, err)
		}
		applied = append(applied, meta.Kind)
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if !strings.Contains(" "+strings.Join(applied, " ")+" ", " "+k+" ") {
			t.Fatalf("%s has no %s of the agent (applied: %v)", draManifest, k, applied)
		}
	}
}

// agentToken returns a token of the agent's ServiceAccount bound to a pod
// on node, as the kubelet projects it into the agent's pod (the API
// server adds the node's name to it).
func agentToken(t *testing.T, ns, node string) string {
	t.Helper()
	ctx := t.Context()
	cs := kubeClient(t)
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentName,
			Containers: []corev1.Container{{Name: "agent", Image: "slingshot-agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, agentName, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

func slice(name, node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: "cxi.slingshot.hpe.com", NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
}

// refusedBy fails unless err is the policy's refusal saying want.
func refusedBy(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("%s: %v, want refused: %s", what, err, want)
	}
}

// Issue 24, item 5: under the chart's ClusterRole an agent could write
// any node's ResourceSlices. With the chart's ValidatingAdmissionPolicy
// on a real API server, an agent whose token is bound to a pod on one
// node writes that node's slice, and is refused another node's: create,
// update, delete; a token that names no node is refused altogether, and
// other users are not matched.
func TestIssue24Item5AgentWritesAnotherNodesResourceSlice(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "slices")
	applyAgentSlicePolicy(t, ns)
	admin := kubeClient(t)
	mine, other := ns+"-n1", ns+"-n2"
	for _, n := range []string{mine, other} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}) })
	}
	user := "system:serviceaccount:" + ns + ":" + agentName
	waitAccess(t, user, authzv1.ResourceAttributes{Verb: "create", Group: "resource.k8s.io", Resource: "resourceslices"}, true)
	agent := newClient(t, tokenConfig(agentToken(t, ns, mine)))
	slices := agent.ResourceV1().ResourceSlices()
	cleanup := func(name string) {
		t.Cleanup(func() { _ = admin.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}) })
	}

	// The policy takes effect when the API server has loaded it: until a
	// create of another node's slice is refused, undo what got through.
	foreign := ns + "-foreign"
	cleanup(foreign)
	eventually(t, 30*time.Second, "the policy refuses another node's slice", func() (bool, string) {
		_, err := slices.Create(ctx, slice(foreign, other), metav1.CreateOptions{})
		if err == nil {
			_ = admin.ResourceV1().ResourceSlices().Delete(ctx, foreign, metav1.DeleteOptions{})
			return false, "created"
		}
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), err.Error()
	})
	_, err := slices.Create(ctx, slice(foreign, other), metav1.CreateOptions{})
	refusedBy(t, "create another node's slice", err, `may only write its own node's ResourceSlices, not one of node "`+other+`"`)

	// Its own node's slice: created, updated, deleted.
	own := ns + "-own"
	cleanup(own)
	s, err := slices.Create(ctx, slice(own, mine), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create its own node's slice: %v", err)
	}
	s.Spec.Pool.Generation++
	if _, err = slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update its own node's slice: %v", err)
	}
	// (spec.nodeName is immutable: the API server itself refuses moving
	// a slice to another node.)

	// Another node's slice, made by someone else: neither changed nor
	// deleted.
	theirs, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice(ns+"-theirs", other), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin creates another node's slice (other users are not matched): %v", err)
	}
	cleanup(theirs.Name)
	theirs.Spec.Pool.Generation++
	_, err = slices.Update(ctx, theirs, metav1.UpdateOptions{})
	refusedBy(t, "update another node's slice", err, `ResourceSlices, not one of node "`+other+`"`)
	err = slices.Delete(ctx, theirs.Name, metav1.DeleteOptions{})
	refusedBy(t, "delete another node's slice", err, `ResourceSlices, not one of node "`+other+`"`)

	if err := slices.Delete(ctx, own, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete its own node's slice: %v", err)
	}

	// A token bound to no pod names no node.
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, agentName, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var unbound kubernetes.Interface = newClient(t, tokenConfig(tok.Status.Token))
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, slice(ns+"-unbound", mine), metav1.CreateOptions{})
	cleanup(ns + "-unbound")
	refusedBy(t, "create with a token that names no node", err, "names no node")
}

package claimstatus

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controller"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Resource is the VNIClaims' resource.
var Resource = schema.GroupVersionResource{Group: "slingshot.hpe.com", Version: "v1alpha1", Resource: "vniclaims"}

// FieldManager names the controller's writes of the status.
const FieldManager = "slingshot-controller"

// KubeClient reads claims with GET and writes their status subresource
// with a JSON merge patch: the patch names only status.vni and
// status.message, so it leaves whatever else the status holds, and a
// patch that changes nothing costs the API server no write.
type KubeClient struct {
	dyn dynamic.Interface
}

// NewKubeClient returns a client of rc, which carries its rate limit
// (the controller's --api-qps and --api-burst).
func NewKubeClient(rc *rest.Config) (*KubeClient, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("vniclaim status client: %w", err)
	}
	return &KubeClient{dyn: dyn}, nil
}

// Get implements Client.
func (k *KubeClient) Get(ctx context.Context, c controller.ClaimRef) (Status, error) {
	u, err := k.dyn.Resource(Resource).Namespace(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return Status{}, notFound(err)
	}
	return statusOf(u), nil
}

// Patch implements Client.
func (k *KubeClient) Patch(ctx context.Context, c controller.ClaimRef, st Status) error {
	body, err := patchBody(st)
	if err != nil {
		return err
	}
	_, err = k.dyn.Resource(Resource).Namespace(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return notFound(err)
}

func notFound(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// statusOf reads a claim's status; a value the CRD's schema would not
// hold reads as a status to be rewritten.
func statusOf(u *unstructured.Unstructured) Status {
	var st Status
	vni, ok, err := unstructured.NestedInt64(u.Object, "status", "vni")
	if err == nil && ok && vni > 0 && vni <= 0xffff {
		st.VNI = uint16(vni)
	}
	st.Message, _, _ = unstructured.NestedString(u.Object, "status", "message")
	return st
}

// patchBody is the merge patch that makes a status say st: null removes
// a field, so a claim that gets its VNI loses the message, and the reverse.
func patchBody(st Status) ([]byte, error) {
	fields := map[string]any{"vni": nil, "message": nil}
	if st.VNI != 0 {
		fields["vni"] = st.VNI
	}
	if st.Message != "" {
		fields["message"] = st.Message
	}
	b, err := json.Marshal(map[string]any{"status": fields})
	if err != nil {
		return nil, fmt.Errorf("vniclaim status patch: %w", err)
	}
	return b, nil
}

package agent

import (
	"context"
	"fmt"

	"github.com/slingshot-k8s/slingshot/agent/devplugin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
)

// podMetaWatch keeps the labels and annotations of the pods bound to this
// node, from one metadata-only watch of the API server (the kubelet's own
// field selector, spec.nodeName), so that a DRA Prepare can name the pod's
// Job without a read per claim: a Job's claims on the node then share one
// controller call (engine.Leases.AcquireShared), as the device-plugin
// path's pods do through the runtime's sandbox labels.
type podMetaWatch struct {
	factory metadatainformer.SharedInformerFactory
	pods    informers.GenericInformer
}

func newPodMetaWatch(cfg *rest.Config, node string) (*podMetaWatch, error) {
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes metadata client: %w", err)
	}
	onNode := fields.OneTermEqualSelector("spec.nodeName", node).String()
	f := metadatainformer.NewFilteredSharedInformerFactory(client, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = onNode
	})
	pods := f.ForResource(corev1.SchemeGroupVersion.WithResource("pods"))
	// Only labels and annotations are read: drop the rest of what the
	// metadata carries, the managed fields above all.
	if err := pods.Informer().SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.ManagedFields = nil
			m.OwnerReferences = nil
			m.Finalizers = nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("pod metadata watch: %w", err)
	}
	return &podMetaWatch{factory: f, pods: pods}, nil
}

// run watches until ctx ends.
func (w *podMetaWatch) run(ctx context.Context) error {
	w.factory.Start(ctx.Done())
	<-ctx.Done()
	w.factory.Shutdown()
	return nil
}

// meta returns the labels and annotations of the pod, when the watch has
// seen the pod of that UID; a pod it has not seen yet is not an error (the
// caller then leases without sharing).
func (w *podMetaWatch) meta(namespace, name, uid string) (labels, annotations map[string]string, ok bool) {
	obj, err := w.pods.Lister().ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, nil, false
	}
	m, isMeta := obj.(*metav1.PartialObjectMetadata)
	if !isMeta || m.UID != types.UID(uid) {
		return nil, nil, false
	}
	return m.Labels, m.Annotations, true
}

// apiAnnotations reads a pod's annotations with one metadata-only GET:
// the device plugin's pod path asks only where the runtime did not report
// them with the sandbox (its namespace found through /proc).
func apiAnnotations(cfg *rest.Config) (devplugin.AnnotationReader, error) {
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes metadata client: %w", err)
	}
	pods := client.Resource(corev1.SchemeGroupVersion.WithResource("pods"))
	return func(ctx context.Context, namespace, name, uid string) (map[string]string, error) {
		m, err := pods.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if uid != "" && m.UID != types.UID(uid) {
			return nil, fmt.Errorf("pod %s/%s has UID %s on the API server, not %s", namespace, name, m.UID, uid)
		}
		return m.Annotations, nil
	}, nil
}

package hooks

import (
	"context"
	"errors"
	"fmt"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons a hook request is refused, the reason label of
// slingshot_controller_hook_refused_total.
const (
	// ReasonNoParent: /sync for a parent the API server does not have.
	ReasonNoParent = "no-parent"
	// ReasonUIDMismatch: /sync for a UID the parent of that name lacks
	// (the parent was deleted and made again, or the UID is forged).
	ReasonUIDMismatch = "uid-mismatch"
	// ReasonParentAlive: /finalize of a deletion the API server does not
	// see: the parent has that UID and no deletionTimestamp.
	ReasonParentAlive = "parent-alive"
	// ReasonKindNotFollowed: a parent of a kind outside --owner-kinds,
	// which the controller cannot look up.
	ReasonKindNotFollowed = "kind-not-followed"
	// ReasonParentDeleting: /sync for a parent being deleted. Not an
	// error: the answer is 200 with nothing leased.
	ReasonParentDeleting = "parent-deleting"

	reasonList = ReasonNoParent + ", " + ReasonUIDMismatch + ", " + ReasonParentAlive + ", " +
		ReasonKindNotFollowed + ", " + ReasonParentDeleting
)

// ErrRefused is wrapped by the errors of a hook request whose body the API
// server contradicts; the hook answers it with HTTP 409 and does nothing.
var ErrRefused = errors.New("hook request refused")

// RefusedError is a hook request the API server contradicts. It matches
// ErrRefused.
type RefusedError struct {
	// Reason is one of the Reason constants.
	Reason string
	// Detail says what the API server holds.
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s (%s): %s", ErrRefused, e.Reason, e.Detail)
}

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// lookup reads o's parent from the API server. A kind the controller does
// not follow is refused; a failed read wraps controller.ErrUnavailable
// (answered 429 with Retry-After, so Metacontroller retries).
func (h *Handler) lookup(ctx context.Context, o *Object) (*metav1.PartialObjectMetadata, error) {
	meta, err := h.parents.Lookup(ctx, ownerOf(o))
	switch {
	case errors.Is(err, owner.ErrNotFollowed):
		return nil, &RefusedError{Reason: ReasonKindNotFollowed,
			Detail: fmt.Sprintf("%s %s/%s: the controller looks up only its --owner-kinds and VNIClaims", o.Kind, o.Metadata.Namespace, o.Metadata.Name)}
	case err != nil:
		return nil, fmt.Errorf("%w: confirm %s %s/%s with the API server: %w", controller.ErrUnavailable, o.Kind, o.Metadata.Namespace, o.Metadata.Name, err)
	}
	return meta, nil
}

// confirm returns the API server's metadata of the parent o names, and
// refuses a body whose parent does not exist with o's UID.
func (h *Handler) confirm(ctx context.Context, o *Object) (*metav1.PartialObjectMetadata, error) {
	meta, err := h.lookup(ctx, o)
	switch {
	case err != nil:
		return nil, err
	case meta == nil:
		return nil, &RefusedError{Reason: ReasonNoParent,
			Detail: fmt.Sprintf("the API server has no %s %s/%s; no VNI is leased for it", o.Kind, o.Metadata.Namespace, o.Metadata.Name)}
	case string(meta.UID) != o.Metadata.UID:
		return nil, &RefusedError{Reason: ReasonUIDMismatch,
			Detail: fmt.Sprintf("%s %s/%s has UID %s, not %s; no VNI is leased for it", o.Kind, o.Metadata.Namespace, o.Metadata.Name, meta.UID, o.Metadata.UID)}
	}
	return meta, nil
}

// confirmGone refuses a finalize whose parent the API server holds alive:
// with o's UID and no deletionTimestamp. A parent that is gone, or whose
// name now has another UID, is gone.
func (h *Handler) confirmGone(ctx context.Context, o *Object) error {
	meta, err := h.lookup(ctx, o)
	if err != nil {
		return err
	}
	if meta != nil && string(meta.UID) == o.Metadata.UID && meta.DeletionTimestamp == nil {
		return &RefusedError{Reason: ReasonParentAlive,
			Detail: fmt.Sprintf("%s %s/%s (UID %s) is not being deleted; its VNI stays leased", o.Kind, o.Metadata.Namespace, o.Metadata.Name, o.Metadata.UID)}
	}
	return nil
}

// trusted returns o with the annotations and owner references the API
// server holds for it, so that a body cannot choose the parent's policy.
func trusted(o *Object, meta *metav1.PartialObjectMetadata) *Object {
	c := *o
	c.Metadata.Annotations = meta.Annotations
	c.Metadata.OwnerReferences = make([]OwnerReference, 0, len(meta.OwnerReferences))
	for _, r := range meta.OwnerReferences {
		c.Metadata.OwnerReferences = append(c.Metadata.OwnerReferences,
			OwnerReference{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: string(r.UID), Controller: r.Controller})
	}
	return &c
}

package kube

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/controller/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// CRDs holds the custom resource definitions the store needs, one YAML
// file each under crds/.
//
//go:embed crds/*.yaml
var CRDs embed.FS

// Group and Version of the store's resources.
const (
	Group   = "slingshot.hpe.com"
	Version = "v1alpha1"
)

// The store's resources.
var (
	LeaseResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "vnileases"}
	SliceResource      = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "nodeslices"}
	QuarantineResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "vniquarantines"}
	JournalResource    = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "storejournals"}
)

// Annotations on the store's objects. The objects carry no labels: kubectl
// selects them by field instead (the CRDs declare selectableFields, e.g.
// kubectl get vnileases --field-selector spec.owner.namespace=NS), and
// every byte of metadata is paid again in managedFields.
const (
	// AnnotationVersion holds the record's store version.
	AnnotationVersion = "slingshot.hpe.com/version"
)

// ErrBadObject is wrapped when an object read from the API cannot be a
// record of this store (edited by hand, or written by a newer version).
var ErrBadObject = errors.New("invalid store object")

// timeLayout keeps milliseconds, the precision the store promises.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	return time.UnixMilli(t.UnixMilli()), nil
}

// Object bodies, typed by hand; they travel as JSON.

type leaseObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              leaseSpec   `json:"spec"`
	Status            leaseStatus `json:"status"`
}

type leaseSpec struct {
	VNI      uint16      `json:"vni"`
	Scope    string      `json:"scope"`
	LeaseKey string      `json:"leaseKey"`
	Owner    ownerFields `json:"owner"`
	Created  string      `json:"created,omitempty"`
	// HWCollJob is store.Lease.HWCollJob.
	HWCollJob string `json:"hwcollJob,omitempty"`
}

type ownerFields struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	UID        string `json:"uid,omitempty"`
}

type leaseStatus struct {
	Nodes     []string `json:"nodes,omitempty"`
	NodeCount int      `json:"nodeCount"`
	OwnerGone bool     `json:"ownerGone"`
}

type sliceObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              sliceSpec   `json:"spec"`
	Status            sliceStatus `json:"status"`
}

type sliceSpec struct {
	Pool  string `json:"pool"`
	Index int    `json:"index"`
	Node  string `json:"node"`
	Range string `json:"range,omitempty"`
}

type sliceStatus struct {
	Expires   string `json:"expires,omitempty"`
	Allocated int    `json:"allocated"`
	Reported  string `json:"reported,omitempty"`
	Open      bool   `json:"open,omitempty"`
}

type quarantineObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              quarantineSpec `json:"spec"`
}

type quarantineSpec struct {
	VNI      uint16 `json:"vni"`
	Released string `json:"released,omitempty"`
}

type journalObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              journalSpec `json:"spec"`
}

type journalSpec struct {
	Holder string               `json:"holder,omitempty"`
	Epoch  uint64               `json:"epoch"`
	Seq    uint64               `json:"seq"`
	Meta   map[string]metaValue `json:"meta,omitempty"`
	// Batch names the pending batch (epoch.seq when it was committed);
	// its writes carry it in AnnotationBatch.
	Batch        string   `json:"batch,omitempty"`
	PendingCount int      `json:"pendingCount"`
	Pending      string   `json:"pending,omitempty"`
	Parts        []string `json:"parts,omitempty"`
	// Part is set in part objects only.
	Part string `json:"part,omitempty"`
	// Applied is, by resource, the resourceVersion of the newest write
	// to it that the store's writers know of, every batch before this
	// head's pending one included: a follower whose watch of the resource
	// has reached it holds every write of those batches (package doc,
	// "Standby"). A resource missing here is unknown and is listed at a
	// takeover.
	Applied map[string]string `json:"applied,omitempty"`
}

type metaValue struct {
	Value   string `json:"value"`
	Version uint64 `json:"version"`
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: kind}
}

func objectMeta(name, namespace string, version uint64, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: rv,
		Annotations: map[string]string{AnnotationVersion: strconv.FormatUint(version, 10)}}
}

func version(m metav1.ObjectMeta) (uint64, error) {
	v, err := strconv.ParseUint(m.Annotations[AnnotationVersion], 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: %s: annotation %s = %q is not a version", ErrBadObject, m.Name, AnnotationVersion, m.Annotations[AnnotationVersion])
	}
	return v, nil
}

// Object names. A lease is named after its owner's UID, as the VNI
// Service names its VNI objects (vni-<owner-uid>); leases without a UID
// (claims, pods whose UID was not known) and UIDs that are not plain DNS
// labels get a name derived from the whole key. The object's spec holds
// the key, so a name is only an address; two keys that map to one name
// would fail to create (a conflict), never merge.

var uidName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,58}[a-z0-9])?$`)

// LeaseName returns the object name of the lease with key
// "<scope>/<namespace>/<id>".
func LeaseName(key string) string {
	scope, rest, _ := strings.Cut(key, "/")
	ns, id, _ := strings.Cut(rest, "/")
	switch {
	case (scope == string(store.ScopeJob) || scope == string(store.ScopePod)) && uidName.MatchString(id) && looksLikeUID(id):
		return "vni-" + id
	case scope == string(store.ScopeClaim) && ns != "" && len(ns)+len(id)+len("vni-claim-.") <= 253 &&
		len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(id)) == 0:
		// Namespaces hold no dots, so the first dot splits the name.
		return "vni-claim-" + ns + "." + id
	}
	h := sha256.Sum256([]byte(key))
	return "vni-h-" + hex.EncodeToString(h[:12])
}

// looksLikeUID tells a UID (Kubernetes UIDs are UUIDs) from a pod name,
// which a pod key holds when the UID is unknown: a pod named like a UUID
// would otherwise share a name with the pod of that UID.
func looksLikeUID(id string) bool {
	return len(id) == 36 && strings.Count(id, "-") == 4
}

// SliceName returns the object name of slice index of pool (pool names
// are DNS labels).
func SliceName(pool string, index int) string { return pool + "-" + strconv.Itoa(index) }

// QuarantineName returns the object name of the quarantine of vni.
func QuarantineName(vni uint16) string { return "vni-" + strconv.Itoa(int(vni)) }

// Record encoding.

func (s *Store) leaseObject(l *store.Lease, name string, version uint64, rv string) *leaseObject {
	o := &leaseObject{TypeMeta: typeMeta("VNILease"), ObjectMeta: objectMeta(name, s.opts.Namespace, version, rv),
		Spec: leaseSpec{VNI: l.VNI, Scope: string(l.Scope), LeaseKey: l.Key, Created: fmtTime(l.Created), HWCollJob: l.HWCollJob,
			Owner: ownerFields{APIVersion: l.Owner.APIVersion, Kind: l.Owner.Kind, Namespace: l.Owner.Namespace, Name: l.Owner.Name, UID: l.Owner.UID}},
		Status: leaseStatus{Nodes: l.Nodes, NodeCount: len(l.Nodes), OwnerGone: l.OwnerGone}}
	return o
}

func decodeLease(o *leaseObject) (store.Lease, error) {
	v, err := version(o.ObjectMeta)
	if err != nil {
		return store.Lease{}, err
	}
	created, err := parseTime("spec.created", o.Spec.Created)
	if err != nil {
		return store.Lease{}, fmt.Errorf("%w: vnilease %s: %w", ErrBadObject, o.Name, err)
	}
	l := store.Lease{Key: o.Spec.LeaseKey, VNI: o.Spec.VNI, Scope: store.Scope(o.Spec.Scope),
		Owner: store.Owner{APIVersion: o.Spec.Owner.APIVersion, Kind: o.Spec.Owner.Kind, Namespace: o.Spec.Owner.Namespace,
			Name: o.Spec.Owner.Name, UID: o.Spec.Owner.UID},
		Nodes: o.Status.Nodes, OwnerGone: o.Status.OwnerGone, Created: created, HWCollJob: o.Spec.HWCollJob, Version: v}
	if len(l.Nodes) == 0 {
		l.Nodes = nil
	}
	switch {
	case l.Key == "":
		return store.Lease{}, fmt.Errorf("%w: vnilease %s: empty spec.leaseKey", ErrBadObject, o.Name)
	case l.VNI == 0:
		return store.Lease{}, fmt.Errorf("%w: vnilease %s: vni 0", ErrBadObject, o.Name)
	}
	return l, nil
}

func (s *Store) sliceObject(sl *store.Slice, version uint64, rv string) *sliceObject {
	o := &sliceObject{TypeMeta: typeMeta("NodeSlice"), ObjectMeta: objectMeta(SliceName(sl.Pool, sl.Index), s.opts.Namespace, version, rv),
		Spec:   sliceSpec{Pool: sl.Pool, Index: sl.Index, Node: sl.Node},
		Status: sliceStatus{Expires: fmtTime(sl.Expires), Allocated: sl.Allocated, Reported: fmtTime(sl.Reported), Open: sl.Open}}
	if s.opts.SliceRange != nil {
		o.Spec.Range = s.opts.SliceRange(sl.Pool, sl.Index)
	}
	return o
}

func decodeSlice(o *sliceObject) (store.Slice, error) {
	v, err := version(o.ObjectMeta)
	if err != nil {
		return store.Slice{}, err
	}
	exp, err := parseTime("status.expires", o.Status.Expires)
	if err != nil {
		return store.Slice{}, fmt.Errorf("%w: nodeslice %s: %w", ErrBadObject, o.Name, err)
	}
	rep, err := parseTime("status.reported", o.Status.Reported)
	if err != nil {
		return store.Slice{}, fmt.Errorf("%w: nodeslice %s: %w", ErrBadObject, o.Name, err)
	}
	if o.Spec.Pool == "" || o.Spec.Index < 0 || o.Status.Allocated < 0 {
		return store.Slice{}, fmt.Errorf("%w: nodeslice %s: empty pool, negative index or negative allocated count", ErrBadObject, o.Name)
	}
	return store.Slice{Pool: o.Spec.Pool, Index: o.Spec.Index, Node: o.Spec.Node, Expires: exp,
		Allocated: o.Status.Allocated, Reported: rep, Open: o.Status.Open, Version: v}, nil
}

func (s *Store) quarantineObject(q *store.Quarantine, version uint64, rv string) *quarantineObject {
	return &quarantineObject{TypeMeta: typeMeta("VNIQuarantine"), ObjectMeta: objectMeta(QuarantineName(q.VNI), s.opts.Namespace, version, rv),
		Spec: quarantineSpec{VNI: q.VNI, Released: fmtTime(q.Released)}}
}

func decodeQuarantine(o *quarantineObject) (store.Quarantine, error) {
	v, err := version(o.ObjectMeta)
	if err != nil {
		return store.Quarantine{}, err
	}
	rel, err := parseTime("spec.released", o.Spec.Released)
	if err != nil {
		return store.Quarantine{}, fmt.Errorf("%w: vniquarantine %s: %w", ErrBadObject, o.Name, err)
	}
	if o.Spec.VNI == 0 {
		return store.Quarantine{}, fmt.Errorf("%w: vniquarantine %s: vni 0", ErrBadObject, o.Name)
	}
	return store.Quarantine{VNI: o.Spec.VNI, Released: rel, Version: v}, nil
}

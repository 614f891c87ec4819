package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
)

// apiStandIn answers a DRA-mode agent's calls to the Kubernetes API with
// what a kube-apiserver would, for the objects a test puts in it: the
// claims the kubelet stand-in prepares and the node. A real kube-apiserver
// (hack/kube-apiserver builds one) takes minutes to build and needs etcd,
// which `make monitoring` must not; the agent's metrics do not depend on
// what the API server does beyond answering. Objects are JSON kept by
// path; a list is every object under its collection; a watch stays
// quiet until the client goes; a patch returns the object unchanged (the
// agent's claim status writes are informational). Every request it
// cannot answer is kept, for the log of a failed test.
type apiStandIn struct {
	srv *httptest.Server

	mu       sync.Mutex // guards objects, seq and unknowns
	objects  map[string]map[string]any
	seq      int
	unknowns []string
	// closing ends the watches when the test ends.
	closing chan struct{}
}

// kinds are the kinds of the collections the agent lists or writes.
var kinds = map[string]string{
	"pods": "Pod", "nodes": "Node", "events": "Event",
	"resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
}

func newAPIStandIn(t *testing.T) *apiStandIn {
	t.Helper()
	a := &apiStandIn{objects: map[string]map[string]any{}, closing: make(chan struct{})}
	a.srv = httptest.NewServer(a)
	// After the agent's cleanup (started later, stopped first): the
	// watches end, then the server waits for its handlers.
	t.Cleanup(func() {
		close(a.closing)
		a.srv.Close()
	})
	return a
}

// kubeconfig writes a kubeconfig file for the stand-in into dir.
func (a *apiStandIn) kubeconfig(dir string) (string, error) {
	p := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: standin, cluster: {server: %q}}]
users: [{name: agent, user: {}}]
contexts: [{name: standin, context: {cluster: standin, user: agent}}]
current-context: standin
`, a.srv.URL)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}

// put stores obj (a typed object or a map) at its path, e.g.
// /api/v1/nodes/n1.
func (a *apiStandIn) put(p string, obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("put %s: %w", p, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["resourceVersion"] = strconv.Itoa(a.seq)
	a.objects[p] = m
	return nil
}

// unanswered are the requests the stand-in answered 404 for lack of the
// object or of the verb.
func (a *apiStandIn) unanswered() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.unknowns)
}

func (a *apiStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	// A subresource (a claim's status) is its object's.
	if base, sub := path.Split(p); sub == "status" {
		p = strings.TrimSuffix(base, "/")
	}
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && q.Get("watch") != "":
		a.watch(w, r)
	case r.Method == http.MethodGet && a.isCollection(p):
		a.list(w, r, p)
	case r.Method == http.MethodGet, r.Method == http.MethodPatch, r.Method == http.MethodPut:
		a.mu.Lock()
		obj, ok := a.objects[p]
		a.mu.Unlock()
		if !ok {
			a.notFound(w, r)
			return
		}
		if r.Method == http.MethodPut {
			a.create(w, r, p, false)
			return
		}
		writeJSON(w, http.StatusOK, obj)
	case r.Method == http.MethodPost:
		a.create(w, r, p, true)
	case r.Method == http.MethodDelete:
		a.mu.Lock()
		_, ok := a.objects[p]
		delete(a.objects, p)
		a.mu.Unlock()
		if !ok {
			a.notFound(w, r)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success"})
	default:
		a.notFound(w, r)
	}
}

// isCollection reports whether p names a collection: its last element is
// a resource, e.g. /apis/resource.k8s.io/v1/resourceslices.
func (a *apiStandIn) isCollection(p string) bool {
	_, ok := kinds[path.Base(p)]
	return ok
}

// watch holds the watch open without events. A watch that asks for the
// initial events instead of a list (client-go's WatchListClient) is
// refused as an API server without that feature would, so that the
// client lists first.
func (a *apiStandIn) watch(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"reason": "BadRequest", "code": http.StatusBadRequest, "message": "sendInitialEvents is not supported by this stand-in"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	select {
	case <-r.Context().Done():
	case <-a.closing:
	}
}

func (a *apiStandIn) list(w http.ResponseWriter, r *http.Request, p string) {
	a.mu.Lock()
	items := []any{}
	keys := make([]string, 0, len(a.objects))
	for k := range a.objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if inCollection(k, p) {
			items = append(items, a.objects[k])
		}
	}
	rv := strconv.Itoa(a.seq)
	a.mu.Unlock()
	kind, apiVersion := kinds[path.Base(p)]+"List", apiVersionOf(p)
	// The metadata client (the agent's pod watch) asks for metadata only.
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList") {
		kind, apiVersion = "PartialObjectMetadataList", "meta.k8s.io/v1"
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "apiVersion": apiVersion,
		"metadata": map[string]any{"resourceVersion": rv}, "items": items})
}

// create stores the request's body at its name under the collection p
// (post) or at p (put), naming it from generateName where it has no name.
func (a *apiStandIn) create(w http.ResponseWriter, r *http.Request, p string, post bool) {
	obj, err := decodeObject(r.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"reason": "BadRequest", "code": http.StatusBadRequest, "message": err.Error()})
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	name, _ := meta["name"].(string)
	if name == "" {
		gen, _ := meta["generateName"].(string)
		name = gen + strconv.Itoa(a.seq)
		meta["name"] = name
	}
	if _, ok := meta["uid"]; !ok {
		meta["uid"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", a.seq)
	}
	meta["resourceVersion"] = strconv.Itoa(a.seq)
	if post {
		p = p + "/" + name
	}
	a.objects[p] = obj
	code := http.StatusOK
	if post {
		code = http.StatusCreated
	}
	writeJSON(w, code, obj)
}

// decodeObject reads a request's object as the API server would, in
// whichever encoding client-go sent it (protobuf for the built-in types,
// JSON otherwise), and returns it as JSON's map.
func decodeObject(body io.Reader) (map[string]any, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %v: %w", gvk, err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("encode %v: %w", gvk, err)
	}
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	return m, nil
}

func (a *apiStandIn) notFound(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.unknowns = append(a.unknowns, r.Method+" "+r.URL.String())
	a.mu.Unlock()
	writeJSON(w, http.StatusNotFound, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"reason": "NotFound", "code": http.StatusNotFound, "message": r.URL.Path + " not found"})
}

// apiVersionOf is the group/version of a path: /api/v1/... is v1,
// /apis/G/V/... is G/V.
func apiVersionOf(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) >= 2 && parts[0] == "api" {
		return parts[1]
	}
	if len(parts) >= 3 && parts[0] == "apis" {
		return parts[1] + "/" + parts[2]
	}
	return "v1"
}

// inCollection reports whether the object at k is in the list at p: its
// own collection's, or, for a namespaced object, the list of its
// resource across namespaces.
func inCollection(k, p string) bool {
	dir := path.Dir(k)
	if dir == p {
		return true
	}
	gv := groupVersionOf(p)
	if p != gv+"/"+path.Base(p) {
		return false // one namespace's list, not dir's
	}
	rest, ok := strings.CutPrefix(dir, gv+"/namespaces/")
	if !ok {
		return false
	}
	ns, res, ok := strings.Cut(rest, "/")
	return ok && ns != "" && res == path.Base(p)
}

// groupVersionOf is the path's prefix up to its version: /apis/G/V.
func groupVersionOf(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		return "/api/" + parts[1]
	case len(parts) >= 3 && parts[0] == "apis":
		return "/apis/" + parts[1] + "/" + parts[2]
	}
	return p
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// The store talks JSON to the API server through a plain REST client and
// decodes into the object types above directly: a list of thousands of
// leases is decoded once, not into maps first.

// newRESTClient returns a JSON client for the store's group and version.
// A config without a rate limit (QPS 0) gets 500 queries per second with
// bursts of 1000 instead of client-go's default of 5, which would
// throttle every batch.
func newRESTClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	if c.QPS == 0 {
		c.QPS, c.Burst = 500, 1000
	}
	gv := schema.GroupVersion{Group: Group, Version: Version}
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	// Only metav1.Status needs decoding by the client: errors.
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = "slingshot-controller-store"
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("rest client: %w", err)
	}
	return rc, nil
}

// listMeta is the part of a list's metadata the store reads.
type listMeta struct {
	Continue        string `json:"continue,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type objectList[T any] struct {
	Metadata listMeta `json:"metadata"`
	Items    []T      `json:"items"`
}

func (s *Store) get(ctx context.Context, r resource, name string, into any) error {
	return s.call(ctx, func(ctx context.Context) error {
		raw, err := s.rc.Get().Namespace(s.opts.Namespace).Resource(string(r)).Name(name).Do(ctx).Raw()
		if err != nil {
			return err
		}
		return decodeJSON(raw, into)
	})
}

// put creates or updates obj (its ResourceVersion is the precondition of
// an update) and returns the new resourceVersion.
func (s *Store) put(ctx context.Context, r resource, name string, obj any, create bool) (string, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	var out struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	err = s.call(ctx, func(ctx context.Context) error {
		req := s.rc.Post().Namespace(s.opts.Namespace).Resource(string(r))
		if !create {
			req = s.rc.Put().Namespace(s.opts.Namespace).Resource(string(r)).Name(name)
		}
		raw, err := req.Body(body).Do(ctx).Raw()
		if err != nil {
			return err
		}
		return decodeJSON(raw, &out)
	})
	if err != nil {
		return "", err
	}
	return out.Metadata.ResourceVersion, nil
}

// remove deletes r/name; rv, unless empty, is its precondition. It
// returns the deletion's resourceVersion (the API server answers with the
// object as deleted, at the revision of its delete event), or "" where
// the answer holds none.
func (s *Store) remove(ctx context.Context, r resource, name, rv string) (string, error) {
	opts := metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}}
	if rv != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
	}
	body, err := json.Marshal(opts)
	if err != nil {
		return "", err
	}
	var out struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	err = s.call(ctx, func(ctx context.Context) error {
		raw, err := s.rc.Delete().Namespace(s.opts.Namespace).Resource(string(r)).Name(name).Body(body).Do(ctx).Raw()
		if err != nil {
			return err
		}
		// A body that is not an object (a Status) leaves the version unknown.
		_ = json.Unmarshal(raw, &out)
		return nil
	})
	return out.Metadata.ResourceVersion, err
}

// listAll pages through every object of r, adding to ls what each page
// cost: the wait for the API server's answer and its decoding apart. It
// returns the list's resourceVersion: every page of a list with continue
// tokens is read at the first page's revision.
func listAll[T any](ctx context.Context, s *Store, r resource, ls *listStats, add func(o *T)) (string, error) {
	cont, rv := "", ""
	for {
		var page objectList[T]
		err := s.call(ctx, func(ctx context.Context) error {
			req := s.rc.Get().Namespace(s.opts.Namespace).Resource(string(r)).Param("limit", strconv.Itoa(listPage))
			if cont != "" {
				req = req.Param("continue", cont)
			}
			t0 := time.Now()
			raw, err := req.Do(ctx).Raw()
			t1 := time.Now()
			if err != nil {
				return err
			}
			err = decodeJSON(raw, &page)
			ls.add(t1.Sub(t0), time.Since(t1), len(raw))
			return err
		})
		if err != nil {
			return "", fmt.Errorf("list %s: %w", r, err)
		}
		for i := range page.Items {
			add(&page.Items[i])
		}
		if rv == "" {
			rv = page.Metadata.ResourceVersion
		}
		if cont = page.Metadata.Continue; cont == "" {
			return rv, nil
		}
	}
}

// listPage is the page size of lists: large pages keep a load of many
// thousand leases to a few round trips.
const listPage = 2000

// listStats sums what the pages of a load's lists cost; the lists run in
// parallel, so the sums can exceed the load's wall time.
type listStats struct {
	mu            sync.Mutex
	pages, bytes  int
	fetch, decode time.Duration
	slowest       time.Duration
}

func (ls *listStats) add(fetch, decode time.Duration, n int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.pages++
	ls.bytes += n
	ls.fetch += fetch
	ls.decode += decode
	ls.slowest = max(ls.slowest, fetch)
}

func decodeJSON(raw []byte, into any) error {
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%w: %w", ErrBadObject, err)
	}
	return nil
}

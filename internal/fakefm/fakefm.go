// Package fakefm is a fake HPE Slingshot fabric manager for tests: the
// hardware-collectives job objects and an OAuth2 token endpoint, over
// real HTTP (mount [FM] on an httptest.Server).
//
// It speaks the protocol as Slurm's switch/hpe_slingshot client speaks it
// (collectives.c, rest.c in SchedMD's Slurm), and keeps to what that
// client shows:
//
//   - GET /fabric/collectives/jobs/ lists the job objects as
//     {"documentLinks": ["/fabric/collectives/jobs/<id>", ...]};
//   - GET /fabric/collectives/jobs/<id> answers the object, with its
//     "sessionToken", or 404;
//   - POST /fabric/collectives/jobs with {"jobID": ..., "mcastLimit": n}
//     creates it and answers it;
//   - DELETE /fabric/collectives/jobs/<id> removes it;
//   - error answers carry {"detail": "..."};
//   - with OAuth configured, every request needs "Authorization: Bearer
//     <token>" of a token the token endpoint issued, else 401; the token
//     endpoint takes the client-credentials grant as a form (grant_type,
//     client_id, client_secret, scope) and answers {"access_token": ...}.
//
// Assumed, since Slurm's client does not show it: the object's other
// fields ("jobID", "mcastLimit", "jobSteps"), the statuses of success
// (200 for GET and POST, 204 for DELETE), 409 for a POST of an existing
// job, 400 for a malformed body, 415 for a body not declared JSON, and
// "expires_in" in the token answer. Not modelled: the PATCH of
// "jobSteps" (Slurm's per-step release, which a Kubernetes job with one
// step does not need), the multicasts endpoint libfabric itself calls,
// HTTP basic authentication and mTLS (the test's httptest.Server can do
// TLS).
//
// Tests steer it: [FM.FailNext] answers the next requests with an error
// status (500s, 429s), [FM.FailEvery] fails a share of requests,
// [FM.Hold] stops a request after it took effect and before its answer
// until the test lets it go (or the client gives up), and [FM.RevokeTokens]
// refuses the tokens issued so far. It is safe for concurrent use.
package fakefm

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Paths the fake serves.
const (
	JobsPath  = "/fabric/collectives/jobs"
	TokenPath = "/oauth/token"
)

// Options configure an FM. With ClientID set, OAuth is required.
type Options struct {
	ClientID, ClientSecret string
	// ExpiresIn is the token answer's expires_in in seconds; 0 leaves it
	// out.
	ExpiresIn int
}

// Job is one job object.
type Job struct {
	ID           string `json:"jobID"`
	MCastLimit   int    `json:"mcastLimit"`
	SessionToken string `json:"sessionToken"`
	// JobSteps maps a step to its multicast addresses; always empty here.
	JobSteps map[string][]string `json:"jobSteps"`
}

// Call is one request as the fake saw it.
type Call struct {
	Method, Path string
	// Status is what the fake answered (0 when the client left first).
	Status int
}

// FM is the fake fabric manager; the zero value is not usable, call New.
type FM struct {
	opts Options

	mu      sync.Mutex
	jobs    map[string]*Job
	seq     int
	tokens  map[string]bool // issued and not revoked
	fails   []failure
	every   int // fail every n-th request; 0 never
	served  int
	holds   []*Hold
	calls   []Call
	created int // job objects ever created
}

type failure struct {
	method string
	status int
}

// New returns an FM with no job.
func New(opts Options) *FM {
	return &FM{opts: opts, jobs: map[string]*Job{}, tokens: map[string]bool{}}
}

// Hold is a request stopped between taking effect and being answered.
type Hold struct {
	method, path string
	arrived      chan struct{}
	release      chan struct{}
	once         sync.Once
}

// Arrived is closed once a request matching the hold has taken effect.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held request answer; it is safe to call twice.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

// Hold stops the next request of method whose path starts with prefix
// after it took effect (a POST has created its job, a DELETE removed it)
// and before it is answered, until Release is called or the client gives
// up. Tests use it to kill a controller between a call and its record.
func (f *FM) Hold(method, prefix string) *Hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := &Hold{method: method, path: prefix, arrived: make(chan struct{}), release: make(chan struct{})}
	f.holds = append(f.holds, h)
	return h
}

// FailNext answers the next n requests of method (any method for "")
// with status and a detail, without taking effect.
func (f *FM) FailNext(method string, n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fails = append(f.fails, failure{method: method, status: status})
	}
}

// ClearFailures drops the failures FailNext queued and stops FailEvery.
func (f *FM) ClearFailures() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails, f.every = nil, 0
}

// FailEvery answers every n-th request with 500 without taking effect, a
// deterministic failure rate of 1/n; 0 stops it.
func (f *FM) FailEvery(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.every, f.served = n, 0
}

// RevokeTokens refuses every token issued so far, as an expired one is.
func (f *FM) RevokeTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.tokens)
}

// Jobs returns the job objects by ID.
func (f *FM) Jobs() map[string]Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Job, len(f.jobs))
	for id, j := range f.jobs {
		out[id] = *j
	}
	return out
}

// Created returns how many job objects were ever created.
func (f *FM) Created() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

// Calls returns the requests seen so far, token requests included.
func (f *FM) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// ServeHTTP implements http.Handler.
func (f *FM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	i := len(f.calls)
	f.calls = append(f.calls, Call{Method: r.Method, Path: r.URL.Path})
	f.mu.Unlock()
	rec := &statusWriter{ResponseWriter: w}
	f.serve(rec, r)
	f.mu.Lock()
	f.calls[i].Status = rec.status
	f.mu.Unlock()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (f *FM) serve(w *statusWriter, r *http.Request) {
	if r.URL.Path == TokenPath {
		f.token(w, r)
		return
	}
	if status, ok := f.injected(r.Method); ok {
		detail(w, status, "injected failure")
		return
	}
	if !f.authorized(r) {
		detail(w, http.StatusUnauthorized, "missing or refused bearer token")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, JobsPath)
	if !ok {
		detail(w, http.StatusNotFound, "no such resource")
		return
	}
	switch {
	case (rest == "" || rest == "/") && r.Method == http.MethodPost:
		f.create(w, r)
	case rest == "/" && r.Method == http.MethodGet:
		f.list(w, r)
	case strings.HasPrefix(rest, "/") && len(rest) > 1:
		id, err := url.PathUnescape(rest[1:])
		if err != nil || strings.Contains(id, "/") {
			detail(w, http.StatusNotFound, "no such job")
			return
		}
		switch r.Method {
		case http.MethodGet:
			f.get(w, r, id)
		case http.MethodDelete:
			f.delete(w, r, id)
		default:
			detail(w, http.StatusMethodNotAllowed, r.Method+" not supported here")
		}
	default:
		detail(w, http.StatusMethodNotAllowed, r.Method+" not supported here")
	}
}

// injected returns the status of a failure due for this request.
func (f *FM) injected(method string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, fl := range f.fails {
		if fl.method == "" || fl.method == method {
			f.fails = slices.Delete(f.fails, i, i+1)
			return fl.status, true
		}
	}
	if f.every > 0 {
		f.served++
		if f.served%f.every == 0 {
			return http.StatusInternalServerError, true
		}
	}
	return 0, false
}

func (f *FM) authorized(r *http.Request) bool {
	if f.opts.ClientID == "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	defer f.mu.Unlock()
	return ok && f.tokens[tok]
}

// hold blocks a request that took effect while a matching hold waits.
func (f *FM) hold(r *http.Request) {
	f.mu.Lock()
	var h *Hold
	for i, c := range f.holds {
		if c.method == r.Method && strings.HasPrefix(r.URL.Path, c.path) {
			h = c
			f.holds = slices.Delete(f.holds, i, i+1)
			break
		}
	}
	f.mu.Unlock()
	if h == nil {
		return
	}
	close(h.arrived)
	select {
	case <-h.release:
	case <-r.Context().Done():
	}
}

func (f *FM) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		detail(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	if err := r.ParseForm(); err != nil {
		detail(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("client_id") != f.opts.ClientID ||
		r.PostForm.Get("client_secret") != f.opts.ClientSecret || f.opts.ClientID == "" {
		detail(w, http.StatusUnauthorized, "invalid client")
		return
	}
	f.mu.Lock()
	f.seq++
	tok := "access-" + strconv.Itoa(f.seq)
	f.tokens[tok] = true
	f.mu.Unlock()
	ans := map[string]any{"access_token": tok, "token_type": "Bearer"}
	if f.opts.ExpiresIn > 0 {
		ans["expires_in"] = f.opts.ExpiresIn
	}
	answer(w, http.StatusOK, ans)
}

func (f *FM) create(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		detail(w, http.StatusUnsupportedMediaType, "want application/json")
		return
	}
	var req struct {
		JobID      *string `json:"jobID"`
		MCastLimit *int    `json:"mcastLimit"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := json.Unmarshal(body, &req); err != nil || req.JobID == nil || *req.JobID == "" || req.MCastLimit == nil || *req.MCastLimit < 1 {
		detail(w, http.StatusBadRequest, "want {\"jobID\": non-empty string, \"mcastLimit\": positive integer}")
		return
	}
	f.mu.Lock()
	if _, ok := f.jobs[*req.JobID]; ok {
		f.mu.Unlock()
		detail(w, http.StatusConflict, "job "+*req.JobID+" exists")
		return
	}
	f.seq++
	j := &Job{ID: *req.JobID, MCastLimit: *req.MCastLimit, SessionToken: fmt.Sprintf("session-%d", f.seq), JobSteps: map[string][]string{}}
	f.jobs[j.ID] = j
	f.created++
	out := *j
	f.mu.Unlock()
	f.hold(r)
	answer(w, http.StatusOK, out)
}

func (f *FM) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	links := make([]string, 0, len(f.jobs))
	for _, id := range slices.Sorted(maps.Keys(f.jobs)) {
		links = append(links, JobsPath+"/"+id)
	}
	f.mu.Unlock()
	f.hold(r)
	answer(w, http.StatusOK, map[string]any{"documentLinks": links})
}

func (f *FM) get(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	j, ok := f.jobs[id]
	var out Job
	if ok {
		out = *j
	}
	f.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "job "+id+" not found")
		return
	}
	f.hold(r)
	answer(w, http.StatusOK, out)
}

func (f *FM) delete(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	_, ok := f.jobs[id]
	delete(f.jobs, id)
	f.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "job "+id+" not found")
		return
	}
	f.hold(r)
	w.WriteHeader(http.StatusNoContent)
}

func detail(w http.ResponseWriter, status int, msg string) {
	answer(w, status, map[string]string{"detail": msg})
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

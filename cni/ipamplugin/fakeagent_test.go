package ipamplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// fakeAgent serves ipamwire on a real unix socket from memory: one pool,
// 10.150.0.0/16, addresses handed out in order. It records the requests
// it was sent, so that tests see what the plugin asked.
type fakeAgent struct {
	socket string

	mu     sync.Mutex
	addrs  map[ipamwire.Attachment]netip.Prefix
	nets   map[ipamwire.Attachment]string
	next   netip.Addr
	free   int
	fail   *ipamwire.Error // when set, every call answers it
	adds   []ipamwire.AddRequest
	gcs    []ipamwire.GCRequest
	status []ipamwire.StatusRequest
}

const fakePool = "hsn0"

var fakePrefix = netip.MustParsePrefix("10.150.0.0/16")

// newFakeAgent serves on agent.sock in a temporary directory until the
// test ends.
func newFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	a := &fakeAgent{socket: filepath.Join(t.TempDir(), "agent.sock"), addrs: map[ipamwire.Attachment]netip.Prefix{},
		nets: map[ipamwire.Attachment]string{}, next: netip.MustParseAddr("10.150.0.1"), free: 100}
	l, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ipamwire.PathAdd, handle(a, a.add))
	mux.HandleFunc("POST "+ipamwire.PathDel, handle(a, a.del))
	mux.HandleFunc("POST "+ipamwire.PathCheck, handle(a, a.check))
	mux.HandleFunc("POST "+ipamwire.PathGC, handle(a, a.gc))
	mux.HandleFunc("POST "+ipamwire.PathStatus, handle(a, a.stat))
	srv := &http.Server{Handler: mux}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("fake agent: %v", err)
		}
	})
	return a
}

// handle decodes In, calls f under the agent's lock and writes its answer,
// or its *ipamwire.Error with the status the real agent uses.
func handle[In any](a *fakeAgent, f func(In) (any, *ipamwire.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		out, e := f(in)
		if a.fail != nil {
			out, e = nil, a.fail
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if e != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(e)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	}
}

func (a *fakeAgent) add(in ipamwire.AddRequest) (any, *ipamwire.Error) {
	a.adds = append(a.adds, in)
	if in.Pool != fakePool {
		return nil, &ipamwire.Error{Code: ipamwire.CodeInvalidRequest, Msg: fmt.Sprintf("no ip pool named %q", in.Pool)}
	}
	p, ok := a.addrs[in.Attachment]
	if !ok {
		addr := a.next
		if in.Request.IP.IsValid() {
			addr = in.Request.IP
		} else {
			a.next = a.next.Next()
		}
		p = netip.PrefixFrom(addr, fakePrefix.Bits())
		a.addrs[in.Attachment], a.nets[in.Attachment] = p, in.Network
	}
	return ipamwire.AddResponse{Pool: fakePool, Address: p}, nil
}

func (a *fakeAgent) del(in ipamwire.DelRequest) (any, *ipamwire.Error) {
	delete(a.addrs, in.Attachment)
	delete(a.nets, in.Attachment)
	return struct{}{}, nil
}

func (a *fakeAgent) check(in ipamwire.CheckRequest) (any, *ipamwire.Error) {
	p, ok := a.addrs[in.Attachment]
	switch {
	case !ok:
		return nil, &ipamwire.Error{Code: 3, Msg: fmt.Sprintf("no address recorded for container %s interface %s", in.ContainerID, in.IfName)}
	case in.Address.IsValid() && in.Address != p:
		return nil, &ipamwire.Error{Code: ipamwire.CodeInvalidRequest, Msg: fmt.Sprintf("%s recorded, not %s", p, in.Address)}
	}
	return struct{}{}, nil
}

func (a *fakeAgent) gc(in ipamwire.GCRequest) (any, *ipamwire.Error) {
	a.gcs = append(a.gcs, in)
	valid := map[ipamwire.Attachment]bool{}
	for _, v := range in.Valid {
		valid[v] = true
	}
	n := 0
	for att, network := range a.nets {
		if network == in.Network && !valid[att] {
			delete(a.addrs, att)
			delete(a.nets, att)
			n++
		}
	}
	return ipamwire.GCResponse{Released: n}, nil
}

func (a *fakeAgent) stat(in ipamwire.StatusRequest) (any, *ipamwire.Error) {
	a.status = append(a.status, in)
	if in.Pool != fakePool {
		return nil, &ipamwire.Error{Code: ipamwire.CodeNotAvailable, Msg: fmt.Sprintf("no ip pool named %q", in.Pool)}
	}
	return ipamwire.StatusResponse{Free: a.free}, nil
}

// held returns the attachment's address, if any.
func (a *fakeAgent) held(att ipamwire.Attachment) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.addrs[att]
	return p, ok
}

func (a *fakeAgent) set(f func(a *fakeAgent)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

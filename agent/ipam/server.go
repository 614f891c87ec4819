package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// maxBody bounds a request's body: GC's list of valid attachments is
// the longest, a few hundred bytes per pod of the node.
const maxBody = 4 << 20

// CNIOwner is the owner key of a CNI attachment.
func CNIOwner(att ipamwire.Attachment) string {
	return "cni/" + att.ContainerID + "/" + att.IfName
}

// Handler serves the ipamwire protocol for the slingshot-ipam plugin.
func (a *Allocator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ipamwire.PathAdd, serve(a.serveAdd))
	mux.HandleFunc("POST "+ipamwire.PathDel, serve(a.serveDel))
	mux.HandleFunc("POST "+ipamwire.PathCheck, serve(a.serveCheck))
	mux.HandleFunc("POST "+ipamwire.PathGC, serve(a.serveGC))
	mux.HandleFunc("POST "+ipamwire.PathStatus, serve(a.serveStatus))
	return mux
}

// serve decodes a request of type In, calls f, and writes its answer or
// its error as an ipamwire.Error.
func serve[In any](f func(r *http.Request, in In) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err == nil && len(data) > maxBody {
			err = fmt.Errorf("body over %d bytes", maxBody)
		}
		if err == nil {
			err = json.Unmarshal(data, &in)
		}
		if err != nil {
			writeError(w, &ipamwire.Error{Code: ipamwire.CodeDecodeFailure, Msg: "decode request", Details: err.Error()})
			return
		}
		out, err := f(r, in)
		if err != nil {
			writeError(w, toWire(err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
}

func writeError(w http.ResponseWriter, e *ipamwire.Error) {
	status := http.StatusBadRequest
	if e.Code == ipamwire.CodeTryAgainLater || e.Code == ipamwire.CodeNotAvailable || e.Code == ipamwire.CodeIOFailure {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

// toWire maps the allocator's errors to CNI codes.
func toWire(err error) *ipamwire.Error {
	var e *ipamwire.Error
	if errors.As(err, &e) {
		return e
	}
	code := uint(ipamwire.CodeTryAgainLater)
	switch {
	case errors.Is(err, ErrInvalidRequest):
		code = ipamwire.CodeInvalidRequest
	case errors.Is(err, ErrPoolFull):
		code = ipamwire.CodePoolFull
	case errors.Is(err, ErrAddressTaken):
		code = ipamwire.CodeAddressTaken
	}
	return &ipamwire.Error{Code: code, Msg: err.Error()}
}

// checkAttachment refuses keys that would not name one attachment.
func checkAttachment(att ipamwire.Attachment) error {
	for name, v := range map[string]string{"container ID": att.ContainerID, "interface name": att.IfName} {
		if v == "" || len(v) > 256 || strings.ContainsAny(v, "/\x00\n") {
			return &ipamwire.Error{Code: ipamwire.CodeInvalidEnv, Msg: fmt.Sprintf("bad %s %q", name, v)}
		}
	}
	return nil
}

func (a *Allocator) serveAdd(r *http.Request, in ipamwire.AddRequest) (any, error) {
	if err := checkAttachment(in.Attachment); err != nil {
		return nil, err
	}
	pod := ""
	if in.Pod.Name != "" {
		pod = in.Pod.Namespace + "/" + in.Pod.Name
	}
	al, pfx, err := a.Allocate(r.Context(), Request{Owner: CNIOwner(in.Attachment), Network: in.Network, Pool: in.Pool, Pod: pod, Want: in.Request})
	if err != nil {
		if a.opts.Refused != nil {
			a.opts.Refused(in.Pod, err)
		}
		return nil, err
	}
	return ipamwire.AddResponse{Pool: al.Pool, Address: pfx}, nil
}

func (a *Allocator) serveDel(_ *http.Request, in ipamwire.DelRequest) (any, error) {
	if err := checkAttachment(in.Attachment); err != nil {
		return nil, err
	}
	if _, err := a.Release(CNIOwner(in.Attachment)); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (a *Allocator) serveCheck(_ *http.Request, in ipamwire.CheckRequest) (any, error) {
	if err := checkAttachment(in.Attachment); err != nil {
		return nil, err
	}
	_, pfx, ok := a.Get(CNIOwner(in.Attachment))
	switch {
	case !ok:
		return nil, &ipamwire.Error{Code: 3, Msg: fmt.Sprintf("no address recorded for container %s interface %s", in.ContainerID, in.IfName)}
	case in.Address.IsValid() && in.Address != pfx:
		return nil, &ipamwire.Error{Code: ipamwire.CodeInvalidRequest, Msg: fmt.Sprintf("container %s interface %s has %s recorded, not %s", in.ContainerID, in.IfName, pfx, in.Address)}
	}
	return struct{}{}, nil
}

func (a *Allocator) serveGC(_ *http.Request, in ipamwire.GCRequest) (any, error) {
	valid := map[string]bool{}
	for _, att := range in.Valid {
		valid[CNIOwner(att)] = true
	}
	n, err := a.GC(in.Network, valid)
	if err != nil {
		return nil, err
	}
	return ipamwire.GCResponse{Released: n}, nil
}

func (a *Allocator) serveStatus(_ *http.Request, in ipamwire.StatusRequest) (any, error) {
	free, err := a.Free(in.Pool)
	if err != nil {
		return nil, &ipamwire.Error{Code: ipamwire.CodeNotAvailable, Msg: err.Error()}
	}
	return ipamwire.StatusResponse{Free: int(min(free, 1<<31-1))}, nil
}

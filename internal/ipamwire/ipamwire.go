// Package ipamwire is the node-local protocol between the slingshot-ipam
// CNI plugin and the agent: JSON over HTTP on a unix socket. The plugin
// holds no state and no credentials; the agent allocates.
//
// Every answer that is not 200 carries an Error whose Code is a CNI error
// code, so that the plugin passes it through unchanged.
package ipamwire

import (
	"net/netip"

	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// DefaultSocket is where the agent listens unless configured otherwise.
const DefaultSocket = "/run/slingshot-agent/ipam.sock"

// Paths of the protocol's calls, all POST with a JSON body.
const (
	PathAdd    = "/v1/add"
	PathDel    = "/v1/del"
	PathCheck  = "/v1/check"
	PathGC     = "/v1/gc"
	PathStatus = "/v1/status"
)

// CNI error codes (CNI spec, "Error" section) the protocol uses.
const (
	CodeIncompatibleVersion = 1
	CodeInvalidEnv          = 4
	CodeIOFailure           = 5
	CodeDecodeFailure       = 6
	CodeInvalidConfig       = 7
	CodeTryAgainLater       = 11
	CodeNotAvailable        = 50
	// Codes of 100 and above are the plugin's own.
	CodeInvalidRequest = 100 // the pod's request contradicts the pools
	CodePoolFull       = 101 // no free address in the pool, and no slice to lease
	CodeAddressTaken   = 102 // the fixed address asked for is in use
)

// Error is every failed answer's body.
type Error struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + ": " + e.Details
}

// Attachment names one interface of one container: the key of an
// allocation, as the CNI spec keys attachments.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Pod names the pod of a container, from the runtime's CNI_ARGS; it is
// recorded with the allocation for inspection, never trusted for keying.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// AddRequest asks for the attachment's address; asking again for the same
// attachment answers the same address.
type AddRequest struct {
	// Network is the CNI network's name: GC is scoped by it.
	Network string `json:"network"`
	Attachment
	Netns string `json:"netns,omitempty"`
	Pod   Pod    `json:"pod,omitzero"`
	// Pool is the network's pool, from the plugin's configuration.
	Pool string `json:"pool"`
	// Request is what the pod asked for (cni-args, the ips capability);
	// its Pool, when set, must agree with Pool.
	Request netreq.Request `json:"request,omitzero"`
}

// AddResponse is the address given to the attachment.
type AddResponse struct {
	Pool string `json:"pool"`
	// Address carries the pool's prefix length: the pool is one network.
	Address netip.Prefix `json:"address"`
}

// DelRequest frees the attachment's address; an unknown attachment is
// not an error.
type DelRequest struct {
	Network string `json:"network"`
	Attachment
}

// CheckRequest asks whether the attachment still holds Address.
type CheckRequest struct {
	Network string `json:"network"`
	Attachment
	Address netip.Prefix `json:"address,omitzero"`
}

// GCRequest frees every allocation of Network whose attachment is not in
// Valid (CNI GC, spec 1.1).
type GCRequest struct {
	Network string       `json:"network"`
	Valid   []Attachment `json:"valid"`
}

// GCResponse counts what GC freed.
type GCResponse struct {
	Released int `json:"released"`
}

// StatusRequest asks whether the network can take new attachments.
type StatusRequest struct {
	Network string `json:"network"`
	Pool    string `json:"pool"`
}

// StatusResponse is the pool's state when it can.
type StatusResponse struct {
	Free int `json:"free"`
}

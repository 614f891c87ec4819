// Package deviceplugin serves kubelet device plugins (API v1beta1): one gRPC
// server and unix socket per extended resource, registration with the
// kubelet, re-registration whenever the kubelet restarts or drops the plugin,
// health streaming through ListAndWatch, and a NUMA-aware preferred
// allocation.
//
// The package knows nothing of the devices it serves. A [Resource] names the
// extended resource and answers Allocate and PreStartContainer; the caller
// feeds the device list, with stable IDs taken from hardware identity, to
// [Server.Update] whenever discovery or health changes. Optional behaviour is
// found by type assertion: a Resource that also implements
// [PreferredAllocator] overrides the built-in [PreferredAllocation] policy.
//
// # Lifetime
//
// [Server.Run] owns everything it starts: the gRPC server, the fsnotify
// watch on the device-plugins directory and the registration goroutine. It
// returns when its context ends (SIGTERM in the agent), after it has stopped
// gRPC and removed its socket. [RunAll] runs several servers, one per
// resource, under one context.
//
// # Why re-registration has three triggers
//
// The kubelet forgets every plugin when it restarts: it deletes the sockets
// in its device-plugins directory and then creates kubelet.sock again. The
// server re-registers when kubelet.sock is created, re-serves when its own
// socket is removed, and also re-registers when the kubelet ends the last
// ListAndWatch stream without restarting. The last trigger closes the hole
// where a plugin stays "Running" while the kubelet has dropped its devices
// and capacity silently falls to zero.
//
// # One registration per kubelet connection
//
// The kubelet refuses a Register for a plugin socket while it holds a
// connection to that socket, and kubelet 1.37.1 then loses track of the
// connection it holds: when that ends, it neither drops the plugin's
// devices nor accepts the plugin again until it restarts. So the
// server registers once with each kubelet (it records the kubelet socket
// its Register call actually reached) and again only after that kubelet has
// dropped it. A removed socket is served again at once, but the gRPC server
// behind the old one keeps serving the kubelet's connection to it until the
// kubelet closes it.
//
// # Concurrency
//
// All methods of [Server] are safe for concurrent use. Run may be called
// once at a time per Server.
package deviceplugin

// Package ipamplugin is the slingshot-ipam CNI IPAM plugin: it reads the
// network configuration and the runtime's arguments, builds the pod's
// request, and asks the node's slingshot-agent for the address over the
// agent's unix socket (package ipamwire). The plugin holds no state; the
// agent allocates from the node's slices.
//
// The configuration is the `ipam` section of any main plugin's network
// configuration (macvlan, ipvlan, host-device, SR-IOV):
//
//	"ipam": {"type": "slingshot-ipam", "pool": "hsn0",
//	         "socket": "/run/slingshot-agent/ipam.sock", "timeout": "30s"}
//
// A pod's request (netreq.Request) comes from three places, which must
// agree: the network configuration's `args.cni` (Multus puts a network
// selection's `cni-args` there: pool, subnet, ip or ips, netdev,
// interface), the `ips` capability (`runtimeConfig.ips`), and CNI_ARGS
// `IP=` as the static and whereabouts plugins accept it.
//
// Errors are CNI errors (*types.Error): the agent's codes pass through
// unchanged, and an agent that cannot be reached is code 11 (try again
// later), so that the runtime retries instead of failing the pod for good.
//
// The package's functions are safe for concurrent use; the plugin is one
// short-lived process per call, so nothing is kept between calls.
package ipamplugin

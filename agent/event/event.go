// Package event is the catalogue of the Kubernetes Events the agent
// writes, and the small interface its parts write them through.
//
// Every reason is defined here once, with the object it is written on,
// what it means and what to do, so that the README's "Events" section can
// list them all (a test checks it does). The parts of the agent that write
// events depend on [Recorder] only; the client-go sink is built by the
// agent's wiring, and a standalone agent (--no-kube) records into [Nop].
package event

import (
	"strings"
	"unicode/utf8"
)

// Reason is an Event's reason: one CamelCase word, what `kubectl describe`
// shows in its Reason column.
type Reason string

// Kind is the kind of object an event is written on.
type Kind string

// The kinds the agent writes events on.
const (
	KindPod  Kind = "Pod"
	KindNode Kind = "Node"
)

// Types of events, as Kubernetes spells them.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// The agent's event reasons. Their meaning and what to do are in
// [Catalogue].
const (
	BindRefused        Reason = "CXIBindRefused"
	SharedClaimRefused Reason = "CXISharedClaimRefused"
	LateBindFailed     Reason = "CXILateBindFailed"
	AddressRefused     Reason = "CXIAddressRefused"
	CleanupStuck       Reason = "CXICleanupStuck"
	LeaseReleaseFailed Reason = "CXILeaseReleaseFailed"

	NodeCleanupStuck   Reason = "CXINodeCleanupStuck"
	NodeCleanupDone    Reason = "CXINodeCleanupDone"
	RecordFailed       Reason = "CXIRecordFailed"
	NRIDisconnected    Reason = "CXINRIDisconnected"
	NRIConnected       Reason = "CXINRIConnected"
	DefaultServiceOpen Reason = "CXIDefaultServiceOpen"
	DefaultServiceShut Reason = "CXIDefaultServiceClosed"
	NICUnhealthy       Reason = "CXINICUnhealthy"
	NICHealthy         Reason = "CXINICHealthy"
	IPSliceLost        Reason = "CXIIPSliceLost"
	ClaimCollectFailed Reason = "CXIClaimCollectFailed"
	UnbindFailed       Reason = "CXIUnbindFailed"
	ServicesUnbound    Reason = "CXIServicesUnbound"
	HSNRestoreFailed   Reason = "CXIHSNRestoreFailed"
)

// Info is what the catalogue says of one reason.
type Info struct {
	Reason Reason
	// Type is Normal or Warning.
	Type string
	// Object is the kind of object the event is written on.
	Object Kind
	// Action is the events.k8s.io action: what the agent was doing.
	Action string
	// Meaning is what the event means for the object, and Todo what the
	// reader should do; both end the event's message.
	Meaning, Todo string
}

// catalogue is every event the agent writes, in the README's order.
var catalogue = []Info{
	{BindRefused, Warning, KindPod, "Bind",
		"The pod's CXI services could not be made or bound to its network namespace, so its containers are not started: a container must never run on a NIC whose service does not admit it.",
		"Read the cause above; the kubelet retries the container. If it names the controller, check slingshot-controller; if it names a network namespace or hostNetwork, the pod needs a network namespace of its own."},
	{SharedClaimRefused, Warning, KindPod, "Bind",
		"A ResourceClaim's CXI services admit one pod's network namespace, and another pod on this node holds the claim: this pod cannot start on it.",
		"Give each pod its own claim with a ResourceClaimTemplate (spec.resourceClaims[].resourceClaimTemplateName); claims of one Job share its VNI."},
	{LateBindFailed, Warning, KindPod, "Bind",
		"The pod's sandbox started while the agent could not bind its claim (the agent or the runtime's NRI connection was down), and binding it when the connection came back failed: its new containers are refused.",
		"Read the cause above; delete the pod so that its controller makes it again, on services bound from the start."},
	{AddressRefused, Warning, KindPod, "Address",
		"The pod's address on the high-speed network could not be allocated, so its hsn interface is not made and the pod does not start.",
		"Read the cause above: a full pool needs a larger ipPools range in the controller, a taken fixed address another one; the kubelet retries."},
	{CleanupStuck, Warning, KindPod, "Cleanup",
		"The pod is gone, but a CXI service made for it is still busy (the driver answers EBUSY): the agent keeps retrying, and the job's VNI stays held on this node until the service is destroyed.",
		"Look for a process still using the NIC (lsof /dev/cxi*, `slingshot-agent inspect`); past cleanup.drainAfter the node is tainted cxi.slingshot.hpe.com/cleanup-stuck:NoSchedule."},
	{LeaseReleaseFailed, Warning, KindPod, "Cleanup",
		"The pod's services are gone, but the controller did not take back this node's hold on the job's VNI after its retries: the hold stays recorded and the agent tries again at the next cleanup pass.",
		"Check that slingshot-controller runs and that this node reaches it; nothing is lost meanwhile, the VNI is only held longer."},
	{NodeCleanupStuck, Warning, KindNode, "Taint",
		"CXI services of pods that are gone are still busy past cleanup.drainAfter: the node is tainted cxi.slingshot.hpe.com/cleanup-stuck:NoSchedule so that new pods go elsewhere, and their VNIs stay held until the services are destroyed.",
		"Find what holds the NIC (`slingshot-agent inspect` lists the services; a process outside Kubernetes, a stuck container), stop it; the taint goes by itself once the services are destroyed. Do not remove it by hand."},
	{NodeCleanupDone, Normal, KindNode, "Taint",
		"The CXI services that were stuck are destroyed: the cleanup-stuck taint is removed and the node takes pods again.",
		"Nothing."},
	{RecordFailed, Warning, KindNode, "Record",
		"The agent could not write its checkpoint while cleaning up a pod: the cleanup is kept and retried, and no service is forgotten.",
		"Check the state directory's file system (full, read-only); the agent's log names the file."},
	{NRIDisconnected, Warning, KindNode, "NRI",
		"The agent lost (or never had) its connection to the container runtime's NRI socket: no container can be checked at its creation (and in DRA mode no claim's services bound), so the agent is not ready and refuses binds: claims are not prepared (DRA), PreStartContainer fails (--deviceplugin-nri); those pods wait.",
		"Check that NRI is enabled in the runtime (containerd: [plugins.\"io.containerd.nri.v1.nri\"] disable = false) and --nri-socket; the agent reconnects by itself."},
	{NRIConnected, Normal, KindNode, "NRI",
		"The agent is connected to the container runtime's NRI socket again: claims are prepared and pods bound again.",
		"Nothing."},
	{DefaultServiceOpen, Warning, KindNode, "DefaultService",
		"A NIC's default CXI service (ID 1) is enabled: any process that can open the NIC may use its VNIs, so pods of different jobs are no longer isolated. The agent is not ready until it is disabled, unless allowOpenDefaultService accepts it.",
		"Disable it (cxi_service disable -s 1 -d cxiN), or set allowOpenDefaultService: true if you accept the risk."},
	{DefaultServiceShut, Normal, KindNode, "DefaultService",
		"The NIC's default CXI service is disabled again: jobs are isolated by their VNIs.",
		"Nothing."},
	{NICUnhealthy, Warning, KindNode, "Health",
		"A NIC is unhealthy (link down, errors): the kubelet or the scheduler no longer gives it to new pods; pods already on it keep it.",
		"Check the link and the switch port (ethtool hsnN, the fabric manager); the NIC is offered again when it recovers."},
	{NICHealthy, Normal, KindNode, "Health",
		"The NIC is healthy again and offered to new pods.",
		"Nothing."},
	{IPSliceLost, Warning, KindNode, "Address",
		"The controller no longer leases one of this node's IP slices of the high-speed network, while pods still use addresses from it: those addresses may be handed to another node's pods.",
		"Check the controller's log and this node's heartbeats; restart the pods that use the slice's addresses so that they get addresses from a slice the node holds."},
	{ClaimCollectFailed, Warning, KindNode, "Collect",
		"The agent found a prepared claim that the API server no longer allocates to this node (the kubelet lost its claim state), and undoing it failed: its services or VNI hold stay until a later pass succeeds.",
		"Read the cause above; a busy service needs the process using it stopped, an unreachable controller to be reachable. The agent retries every pass."},
	{UnbindFailed, Warning, KindNode, "Unbind",
		"At start, a pod's or a claim's services admit a network namespace that is gone or could not be verified as its pod's, and making them unbound again failed: they stay as they are until the next bind, cleanup or unprepare.",
		"Read the cause above; `slingshot-agent inspect` shows the pod or claim. Deleting the pod cleans up its services."},
	{ServicesUnbound, Warning, KindPod, "Unbind",
		"The agent started and could not verify that the pod's network namespace is the one its CXI services admitted (the sandbox was made again while the agent was down, or the runtime did not answer): a recorded namespace may belong to another pod by now, so the services admit nobody until the pod's next container start binds them.",
		"Nothing, if the pod's containers restart (a sandbox made again restarts them). If the pod keeps running without fabric traffic, delete it so that its controller makes it again."},
	{HSNRestoreFailed, Warning, KindPod, "Address",
		"At start, the agent could not put the pod's hsn interface back into its network namespace (it went missing while the agent was down): the pod runs without it, so its TCP/IP on the high-speed network fails; its CXI services are not affected.",
		"Read the cause above (a netdev gone, a name another link took); delete the pod so that its controller makes it again with the interface."},
}

// Catalogue returns every event reason the agent writes.
func Catalogue() []Info { return append([]Info(nil), catalogue...) }

// Lookup returns reason's entry.
func Lookup(r Reason) (Info, bool) {
	for _, i := range catalogue {
		if i.Reason == r {
			return i, true
		}
	}
	return Info{}, false
}

// Object is what an event is written on.
type Object struct {
	Kind                 Kind
	Namespace, Name, UID string
}

// Pod names a pod.
func Pod(namespace, name, uid string) Object {
	return Object{Kind: KindPod, Namespace: namespace, Name: name, UID: uid}
}

// Node names a node. Its UID is its name, as the kubelet's events have it
// and as `kubectl describe node` looks them up.
func Node(name string) Object { return Object{Kind: KindNode, Name: name, UID: name} }

// Recorder writes events. Implementations are safe for concurrent use
// and never block on the API server: an event is informational, and
// nothing waits for it.
type Recorder interface {
	// Record writes reason's event on obj; what says what happened, in a
	// sentence, and the catalogue's meaning and advice follow it.
	Record(obj Object, reason Reason, what string)
}

// Nop records nothing: the standalone agent's recorder.
type Nop struct{}

// Record does nothing.
func (Nop) Record(Object, Reason, string) {}

// MaxMessage is the longest message the API server takes (an Event's
// note is at most 1 kB).
const MaxMessage = 1024

// Message is reason's message: what happened, then what it means and
// what to do, cut to MaxMessage bytes on a character boundary.
func Message(info Info, what string) string {
	tail := info.Meaning
	if info.Todo != "" && info.Todo != "Nothing." {
		tail += " What to do: " + info.Todo
	}
	// The cause goes first but may not crowd out what it means and what
	// to do: a long error chain is cut, never the advice.
	what = truncate(strings.TrimSpace(what), max(MaxMessage-len(tail)-2, MaxMessage/4))
	var b strings.Builder
	if what != "" {
		b.WriteString(what)
		if !strings.HasSuffix(what, ".") {
			b.WriteString(".")
		}
		b.WriteString(" ")
	}
	b.WriteString(tail)
	return truncate(b.String(), MaxMessage)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "..."
	cut := n - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

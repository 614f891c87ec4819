package agent

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/slingshot-k8s/slingshot/agent/checkpoint"
)

// EnvPrefix prefixes the environment variable of every flag:
// --kubelet-dir is also SLINGSHOT_AGENT_KUBELET_DIR.
const EnvPrefix = "SLINGSHOT_AGENT_"

// CXI driver kinds of --cxi-driver.
const (
	DriverUAPI = "uapi" // the real driver: /dev/cxiN under --dev-root
	DriverSim  = "sim"  // the simulated driver, its state under --state-dir
)

// maxSocketPath is what fits a unix socket address (sun_path, 108 bytes
// with its terminating NUL).
const maxSocketPath = 107

// APIs of --api: which Kubernetes API serves the NICs.
const (
	APIDevicePlugin = "deviceplugin"
	APIDRA          = "dra"
)

// CRINone as --cri-socket: find network namespaces from /proc only.
const CRINone = "none"

// Options are the agent's command-line settings. The file named by Config
// holds the rest (see package config).
type Options struct {
	KubeletDir string
	SysfsRoot  string
	DevRoot    string
	ProcRoot   string
	// CRISocket is the container runtime's CRI socket, asked first for a
	// pod's network namespace: empty finds containerd's or CRI-O's
	// (netns.DefaultCRISockets), CRINone asks no runtime.
	CRISocket string
	StateDir  string
	// PinNetns pins the network namespaces the services admit by bind
	// mounts under StateDir/netns (package agent/netns/pin), so that the
	// holds outlive the agent. It needs CAP_SYS_ADMIN, and the state
	// directory mounted Bidirectional to outlive the agent's container.
	PinNetns bool
	// CheckpointFormat is the format the checkpoint is written in:
	// checkpoint.DefaultFormat (3, what release 0.2.0 reads, so that a
	// rollback to it is safe) or checkpoint.Version (4).
	CheckpointFormat int
	Controller       string
	// EmbeddedController opens the in-process controller of
	// --controller=embedded; nil refuses that mode. The agent's main sets
	// it in binaries built with the embedded_controller tag.
	EmbeddedController EmbeddedOpener
	// ControllerCA, ControllerCert, ControllerKey and ControllerTokenFile
	// authenticate the agent to a remote controller (mTLS, or a projected
	// ServiceAccount token over TLS). ControllerInsecureToken allows the
	// token without TLS, for clusters that accept that on their network.
	ControllerCA            string
	ControllerCert          string
	ControllerKey           string
	ControllerTokenFile     string
	ControllerInsecureToken bool
	// ControllerHeartbeat is the interval of the node's heartbeats: slice
	// renewals and the report of the VNIs the node uses.
	ControllerHeartbeat time.Duration
	CXIDriver           string
	Config              string
	NodeName            string
	MetricsAddr         string
	// InspectAddr is a loopback address where /inspect is served besides
	// MetricsAddr's, on which it is answered only when that is a loopback
	// address too: it takes no credentials.
	InspectAddr string
	// CleanManaged also destroys, at start, every non-system service whose
	// VNIs all fall in ManagedVNIs, as `flux-slingshot clean --all` does.
	CleanManaged bool
	// ManagedVNIs is the VNI range the cluster hands out, "min-max".
	ManagedVNIs string
	LogLevel    string
	LogFormat   string
	// IPAMSocket is the unix socket where the slingshot-ipam CNI plugin
	// asks for addresses; empty serves none (the allocator still serves
	// the pods' hsn interfaces).
	IPAMSocket string
	// API is the Kubernetes API the NICs are served through: APIDevicePlugin
	// or APIDRA. A node serves them through one only.
	API string
	// DRADriverName and NRISocket are the DRA mode's: the driver's name
	// and the container runtime's NRI socket.
	DRADriverName string
	NRISocket     string
	// DevicePluginNRI has the device plugin check each container at the
	// runtime's CreateContainer through NRI (NRISocket) and set its
	// environment there, rather than through a CDI spec; while NRI is not
	// connected the agent is not ready and refuses binds.
	DevicePluginNRI bool
	// Kubeconfig is the Kubernetes API's kubeconfig file, "" for the
	// in-cluster configuration: events, the cleanup-stuck node taint and
	// the DRA driver use it.
	Kubeconfig string
	// NoKube runs the device plugin without the Kubernetes API: no
	// events and no cleanup-stuck taint (a standalone node, a demo).
	NoKube bool
	// DRALostClaimGrace is how long the API server must have stopped
	// allocating a prepared claim to this node, read twice, before the
	// agent unprepares it itself: the kubelet lost its claim state.
	DRALostClaimGrace time.Duration
	// DRABindingConditions has each NIC device carry the binding
	// conditions of package draclaim, so that the scheduler binds a pod
	// to the node only once the controller holds its claim's VNI for the
	// node. The controller must write them (its --dra-binding-conditions):
	// without it, a pod waits for the scheduler's binding timeout.
	DRABindingConditions bool
	// DRAPodGroupClaims serves the claims of PodGroups (Kubernetes'
	// DRAWorkloadResourceClaims): a claim of the fabric's VNI device, which
	// the chart publishes, gives the NIC claims of its group's pods one
	// VNI on every node. Each NIC claim's Prepare then reads its pod and
	// the pod's other claims (APIGroupClaims).
	DRAPodGroupClaims bool
}

// RegisterFlags binds every option to fs with its default.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's `directory`: device-plugins/ and pod-resources/kubelet.sock are used under it")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount `path` where the NICs (and GPUs) are discovered")
	fs.StringVar(&o.DevRoot, "dev-root", "/dev", "`path` of the device nodes (/dev/cxiN) as the kubelet's host sees them")
	fs.StringVar(&o.ProcRoot, "proc-root", "/proc", "the host's proc mount `path`, where pods' network namespaces are found")
	fs.StringVar(&o.CRISocket, "cri-socket", "", "the container runtime's CRI `socket`, asked first for a pod's network namespace (then /proc); empty: the first of /run/containerd/containerd.sock and /var/run/crio/crio.sock found in the agent's file system or under <proc-root>/1/root, the host's, whose runtime answers; \"none\": /proc only")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/slingshot-agent", "`directory` for the agent's checkpoint, per-container files, the embedded controller's database and the simulated driver; must be the same path on the host")
	fs.IntVar(&o.CheckpointFormat, "checkpoint-format", checkpoint.DefaultFormat, fmt.Sprintf("the format the checkpoint is written in: %d, which release 0.2.0 reads (a rollback to it stays safe), or %d, which it refuses; this agent reads both, and writes the chosen one from its start", checkpoint.DefaultFormat, checkpoint.Version))
	fs.BoolVar(&o.PinNetns, "pin-netns", false, "pin the network namespaces that pods' CXI services admit by bind mounts under <state-dir>/netns, so that no other pod's namespace can get their inodes while the agent is down or restarting (needs CAP_SYS_ADMIN, and the state directory mounted with Bidirectional propagation to outlive the agent's container; the Helm chart sets it with agent.privileged)")
	// The default is the caller's: "embedded" where the binary has the
	// embedded controller, none (required) where it has not.
	fs.StringVar(&o.Controller, "controller", o.Controller, "the cluster controller's gRPC `address` (host:port), or \"embedded\" for an in-process controller with sqlite in the state directory (binaries built with -tags embedded_controller, where it is the default; required otherwise)")
	fs.StringVar(&o.ControllerCA, "controller-ca-file", "", "PEM `file` of the CA that signed the controller's certificate")
	fs.StringVar(&o.ControllerCert, "controller-cert-file", "", "PEM certificate `file` the agent presents to the controller (mTLS)")
	fs.StringVar(&o.ControllerKey, "controller-key-file", "", "PEM private key `file` of --controller-cert-file")
	fs.StringVar(&o.ControllerTokenFile, "controller-token-file", "", "projected ServiceAccount token `file` sent to the controller (needs --controller-ca-file, or --controller-insecure-token)")
	fs.BoolVar(&o.ControllerInsecureToken, "controller-insecure-token", false, "send the token without TLS (it crosses the cluster network in clear)")
	fs.DurationVar(&o.ControllerHeartbeat, "controller-heartbeat", 10*time.Second, "interval of the heartbeats to the controller: node slice renewals and the report of the VNIs this node uses (keep it well within the controller's --slice-ttl)")
	fs.StringVar(&o.CXIDriver, "cxi-driver", DriverUAPI, "CXI driver: \"uapi\" for the real driver, \"sim\" for the simulated one")
	fs.StringVar(&o.Config, "config", "", "YAML configuration `file`; reloaded when it changes (empty: defaults)")
	fs.StringVar(&o.NodeName, "node-name", "", "this node's `name` (default $NODE_NAME, then the host name)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "127.0.0.1:9479", "`address` of the HTTP endpoint: /metrics, /healthz, /readyz, and /inspect when the address is a loopback one")
	fs.StringVar(&o.InspectAddr, "inspect-addr", "", "loopback `address` (127.0.0.1:PORT) that also serves the HTTP endpoint, for /inspect where --metrics-addr is the node's address; /inspect takes no credentials and is never answered on other addresses")
	fs.BoolVar(&o.CleanManaged, "clean-managed", false, "at start, also destroy every non-system CXI service whose VNIs all fall in --managed-vnis, whoever made it")
	fs.StringVar(&o.ManagedVNIs, "managed-vnis", "1024-65535", "VNI `range` min-max the cluster hands out, for --clean-managed")
	fs.StringVar(&o.IPAMSocket, "ipam-socket", "/run/slingshot-agent/ipam.sock", "unix `socket` where the slingshot-ipam CNI plugin asks for addresses on the high-speed network (its ipam.socket); empty: none")
	fs.StringVar(&o.API, "api", APIDevicePlugin, "Kubernetes `API` that serves the NICs: \"deviceplugin\" (resource hpe.com/cxi) or \"dra\" (Dynamic Resource Allocation: ResourceSlices, claims, and an NRI plugin binding each pod's services); a node serves them through one only")
	fs.StringVar(&o.DRADriverName, "dra-driver-name", "cxi.slingshot.hpe.com", "DRA driver `name` of --api=dra: its ResourceSlices, DeviceClasses and claims' configuration use it")
	fs.StringVar(&o.NRISocket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI `socket`, where --api=dra binds each pod's services when its sandbox runs (and --deviceplugin-nri checks each container)")
	fs.BoolVar(&o.DevicePluginNRI, "deviceplugin-nri", false, "with --api=deviceplugin, check each container at the runtime's CreateContainer through NRI (--nri-socket): its services bound to its pod's namespace, its SLINGSHOT_* environment set there rather than through a CDI spec; while NRI is not connected the agent is not ready and refuses binds")
	fs.DurationVar(&o.DRALostClaimGrace, "dra-lost-claim-grace", 5*time.Minute, "with --api=dra, how long two successful reads of a prepared claim at least this far apart must find it no longer allocated to this node before the agent unprepares it itself (the kubelet lost its claim state); a failed read proves nothing")
	fs.BoolVar(&o.DRAPodGroupClaims, "dra-podgroup-claims", false, "with --api=dra, serve PodGroup claims (Kubernetes' DRAWorkloadResourceClaims, beta in 1.37, gate off): a claim of the fabric's VNI device (pool fabric, device vni, which the chart publishes) gives the NIC claims of its group's pods its one VNI on every node; each NIC claim's Prepare then reads its pod and the pod's claims")
	fs.BoolVar(&o.DRABindingConditions, "dra-binding-conditions", false, "with --api=dra, each NIC device carries the binding conditions VNILeased and VNILeaseFailed: the scheduler binds a pod to this node only once the controller holds its claim's VNI here; the controller must run with --dra-binding-conditions, which writes them (Kubernetes' DRADeviceBindingConditions, beta in 1.37)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `file` for the Kubernetes API (events, the cleanup-stuck node taint, the DRA driver); empty: the in-cluster configuration")
	fs.BoolVar(&o.NoKube, "no-kube", false, "run without the Kubernetes API (device plugin only): no events on pods and the node, and no cleanup-stuck taint")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log `level`: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log `format`: text or json")
}

// Complete fills what defaults from the environment: the node name from
// $NODE_NAME, then the host name.
func (o *Options) Complete(lookup func(string) (string, bool), hostname func() (string, error)) error {
	if o.NodeName != "" {
		return nil
	}
	if v, ok := lookup("NODE_NAME"); ok && v != "" {
		o.NodeName = v
		return nil
	}
	h, err := hostname()
	if err != nil {
		return fmt.Errorf("node name: no --node-name, no NODE_NAME and no host name: %w", err)
	}
	o.NodeName = h
	return nil
}

// Validate checks the options and returns every problem at once.
func (o *Options) Validate() error {
	var errs []error
	for _, p := range []struct{ flag, path string }{
		{"kubelet-dir", o.KubeletDir}, {"sysfs-root", o.SysfsRoot}, {"dev-root", o.DevRoot},
		{"proc-root", o.ProcRoot}, {"state-dir", o.StateDir},
	} {
		if p.path == "" || !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("--%s %q: want an absolute path", p.flag, p.path))
		}
	}
	if o.IPAMSocket != "" && (!filepath.IsAbs(o.IPAMSocket) || len(o.IPAMSocket) > maxSocketPath) {
		errs = append(errs, fmt.Errorf("--ipam-socket %q: want an absolute path of at most %d bytes, or empty", o.IPAMSocket, maxSocketPath))
	}
	if o.CRISocket != "" && o.CRISocket != CRINone && !filepath.IsAbs(o.CRISocket) {
		errs = append(errs, fmt.Errorf("--cri-socket %q: want an absolute path, empty or %q", o.CRISocket, CRINone))
	}
	if o.CheckpointFormat != checkpoint.DefaultFormat && o.CheckpointFormat != checkpoint.Version {
		errs = append(errs, fmt.Errorf("--checkpoint-format %d: want %d or %d", o.CheckpointFormat, checkpoint.DefaultFormat, checkpoint.Version))
	}
	if o.CXIDriver != DriverUAPI && o.CXIDriver != DriverSim {
		errs = append(errs, fmt.Errorf("--cxi-driver %q: want %q or %q", o.CXIDriver, DriverUAPI, DriverSim))
	}
	nriSocketOK := filepath.IsAbs(o.NRISocket) && len(o.NRISocket) <= maxSocketPath
	switch o.API {
	case APIDevicePlugin:
		if o.DRABindingConditions {
			errs = append(errs, errors.New("--dra-binding-conditions: only with --api=dra"))
		}
		if o.DRAPodGroupClaims {
			errs = append(errs, errors.New("--dra-podgroup-claims: only with --api=dra"))
		}
		if o.DevicePluginNRI && !nriSocketOK {
			errs = append(errs, fmt.Errorf("--nri-socket %q: want an absolute path of at most %d bytes", o.NRISocket, maxSocketPath))
		}
	case APIDRA:
		if o.DevicePluginNRI {
			errs = append(errs, errors.New("--deviceplugin-nri: only with --api=deviceplugin (DRA mode always binds through NRI)"))
		}
		if o.NoKube {
			errs = append(errs, errors.New("--no-kube: --api=dra needs the Kubernetes API"))
		}
		if !dnsSubdomain.MatchString(o.DRADriverName) || len(o.DRADriverName) > 63 {
			errs = append(errs, fmt.Errorf("--dra-driver-name %q: want a lower-case DNS subdomain of at most 63 characters", o.DRADriverName))
		}
		if !nriSocketOK {
			errs = append(errs, fmt.Errorf("--nri-socket %q: want an absolute path of at most %d bytes", o.NRISocket, maxSocketPath))
		}
		if o.DRALostClaimGrace < time.Second {
			errs = append(errs, fmt.Errorf("--dra-lost-claim-grace %v: want at least 1s", o.DRALostClaimGrace))
		}
	default:
		errs = append(errs, fmt.Errorf("--api %q: want %q or %q", o.API, APIDevicePlugin, APIDRA))
	}
	switch o.Controller {
	case "":
		errs = append(errs, errors.New("--controller is required: the cluster controller's gRPC address, host:port (the chart sets it to the slingshot-controller Service)"))
	case "embedded":
	default:
		if _, _, err := net.SplitHostPort(o.Controller); err != nil {
			errs = append(errs, fmt.Errorf("--controller %q: want host:port or \"embedded\": %w", o.Controller, err))
		}
	}
	if o.NoKube && o.Kubeconfig != "" {
		errs = append(errs, errors.New("--no-kube and --kubeconfig contradict each other"))
	}
	if o.ControllerHeartbeat <= 0 {
		errs = append(errs, fmt.Errorf("--controller-heartbeat %v: want a positive duration", o.ControllerHeartbeat))
	}
	if (o.ControllerCert == "") != (o.ControllerKey == "") {
		errs = append(errs, errors.New("--controller-cert-file and --controller-key-file go together"))
	}
	if o.ControllerTokenFile != "" && o.ControllerCA == "" && !o.ControllerInsecureToken {
		errs = append(errs, errors.New("--controller-token-file needs --controller-ca-file, or --controller-insecure-token to send it in clear"))
	}
	if o.Controller == "embedded" && (o.ControllerCA != "" || o.ControllerCert != "" || o.ControllerTokenFile != "") {
		errs = append(errs, errors.New("--controller-ca-file, --controller-cert-file and --controller-token-file are for a remote --controller"))
	}
	if o.NodeName == "" || len(o.NodeName) > 253 || strings.ContainsAny(o.NodeName, "/ \t\n") {
		errs = append(errs, fmt.Errorf("--node-name %q: want a Kubernetes node name", o.NodeName))
	}
	if o.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr %q: %w", o.MetricsAddr, err))
		}
	}
	if o.InspectAddr != "" && !isLoopback(o.InspectAddr) {
		errs = append(errs, fmt.Errorf("--inspect-addr %q: %w", o.InspectAddr, errInspectNotLoopback))
	}
	if _, _, err := ParseVNIRange(o.ManagedVNIs); err != nil {
		errs = append(errs, fmt.Errorf("--managed-vnis: %w", err))
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel))
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", o.LogFormat))
	}
	return errors.Join(errs...)
}

var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)

// ParseVNIRange parses "min-max" with 1 <= min <= max <= 65535.
func ParseVNIRange(s string) (lo, hi uint16, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("VNI range %q: want min-max", s)
	}
	var l, h uint64
	if _, err := fmt.Sscan(a, &l); err != nil || strings.TrimSpace(a) != a {
		return 0, 0, fmt.Errorf("VNI range %q: bad minimum", s)
	}
	if _, err := fmt.Sscan(b, &h); err != nil || strings.TrimSpace(b) != b {
		return 0, 0, fmt.Errorf("VNI range %q: bad maximum", s)
	}
	if l < 1 || h > 65535 || l > h {
		return 0, 0, fmt.Errorf("VNI range %q: want 1 <= min <= max <= 65535", s)
	}
	return uint16(l), uint16(h), nil
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/auth"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/hwcoll"
	"github.com/slingshot-k8s/slingshot/controller/owner"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/vnialloc"
	"github.com/slingshot-k8s/slingshot/internal/flagenv"
)

// envPrefix prefixes the environment variable of every flag:
// --vni-range is SLINGSHOT_CONTROLLER_VNI_RANGE.
const envPrefix = "SLINGSHOT_CONTROLLER_"

// Config is the controller's command line.
type Config struct {
	GRPCAddr, HooksAddr, MetricsAddr string
	DB                               string
	Store, StoreNamespace, Identity  string
	LeaderElect                      bool
	LeaseDuration, RenewDeadline     time.Duration
	RetryPeriod                      time.Duration
	VNIRange, PodVNIRange            string
	PodVNISliceSize                  int
	IPPools                          string
	Quarantine, SliceTTL, SliceGrace time.Duration
	SweepInterval, HoldGrace         time.Duration
	MaxLeasesPerNamespace            int
	GRPCMaxConnections               int
	GRPCMaxConnectionsPerHost        int
	GRPCCallsPerSecond               float64
	OwnerKinds                       string
	NoKube                           bool
	Kubeconfig                       string
	APIQPS                           float64
	APIBurst                         int
	Auth                             string
	AgentServiceAccounts             string
	TokenAudiences                   string
	TokenReviewQPS                   float64
	TokenReviewBurst                 int
	TokenReviewTTL                   time.Duration
	TLSCert, TLSKey, ClientCA        string
	MTLSPrefix                       string
	AllowUnboundAgents               bool
	LogLevel, LogFormat              string
	HWColl                           HWCollFlags
	// DRABindingConditions is the agents' DRA driver name whose claims'
	// binding conditions the controller writes; "" writes none.
	DRABindingConditions string
	// DRANodeStale is how long a node's agent may go unheard before its
	// claims' bindings fail.
	DRANodeStale time.Duration
	// DRAPodGroupClaims has the binding conditions lease the VNI of a
	// pod's PodGroup claim, as the agents' --dra-podgroup-claims does.
	DRAPodGroupClaims bool
	// ShowVersion is --version: print the build and exit.
	ShowVersion bool

	// Parsed by Validate.
	controller controller.Config
	kinds      []owner.Kind
}

func envName(flagName string) string { return flagenv.Name(envPrefix, flagName) }

// errVersion is parseFlags's answer to --version: main prints the build.
var errVersion = errors.New("version asked")

// parseFlags reads args, then the environment for every flag not given on
// the command line, then validates. It returns flag.ErrHelp after printing
// the usage for -h/--help, and errVersion for --version.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	c := &Config{}
	fs := flagSet(c, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// Before the environment and validation: the version needs neither,
	// and asking for it must work where the other flags would not.
	if c.ShowVersion {
		return nil, errVersion
	}
	// An empty variable is unset, as a DaemonSet's empty value means.
	lookup := func(name string) (string, bool) { v := getenv(name); return v, v != "" }
	if err := flagenv.Apply(fs, envPrefix, lookup); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// flagSet defines the controller's flags, bound to c, with its usage
// written to out.
func flagSet(c *Config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("slingshot-controller", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.GRPCAddr, "grpc-addr", ":9440", "address of the gRPC API for node agents")
	fs.StringVar(&c.HooksAddr, "hooks-addr", ":9441", "address of the Metacontroller hooks (/sync, /finalize); empty disables")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", ":9442", "address of /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&c.DB, "db", "/var/lib/slingshot-controller/controller.db", "sqlite database file (WAL mode; its directory is created)")
	fs.StringVar(&c.Store, "store", "sqlite", "where leases live: sqlite (the --db file; one replica) or kube (custom resources in --store-namespace; for --leader-elect)")
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the kube store's objects and of the leader election Lease; empty: this pod's namespace")
	fs.StringVar(&c.Identity, "identity", "", "this replica's name in the store and the election; empty: the host (pod) name")
	fs.BoolVar(&c.LeaderElect, "leader-elect", false, "run as one of several replicas: only the elected leader serves, the others are not ready (needs --store kube)")
	fs.DurationVar(&c.LeaseDuration, "leader-elect-lease-duration", 2*time.Second, "how long followers wait after the leader's last renewal before taking over")
	fs.DurationVar(&c.RenewDeadline, "leader-elect-renew-deadline", 1500*time.Millisecond, "how long the leader retries a renewal before it steps down")
	fs.DurationVar(&c.RetryPeriod, "leader-elect-retry-period", 500*time.Millisecond, "interval of election attempts")
	fs.StringVar(&c.VNIRange, "vni-range", controller.DefaultVNIRange.String(), "VNI range MIN-MAX for job VNIs (0, 1 and 10 are never handed out); it may grow, but not shrink over live leases")
	fs.StringVar(&c.PodVNIRange, "pod-vni-range", "", "sub-range MIN-MAX of --vni-range carved into node slices for pod-scoped VNIs; empty: pod-scoped VNIs come from --vni-range")
	fs.IntVar(&c.PodVNISliceSize, "pod-vni-slice-size", 64, "VNIs per node slice of --pod-vni-range")
	fs.StringVar(&c.IPPools, "ip-pools", "", "IP ranges carved into node slices, comma-separated NAME=PREFIX:/LEN (e.g. hsn0=10.150.0.0/16:/24)")
	fs.DurationVar(&c.Quarantine, "quarantine", 60*time.Second, "how long a freed VNI waits before reuse")
	fs.DurationVar(&c.SliceTTL, "slice-ttl", 60*time.Second, "node slice lease time; agents renew well within it")
	fs.DurationVar(&c.SliceGrace, "slice-grace", 5*time.Minute, "how long a node must be gone before its empty slices are reclaimed and a deleted node stops holding VNIs")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", 10*time.Second, "interval of reclaim sweeps (quarantine, gone owners, gone nodes, unused holds)")
	fs.DurationVar(&c.HoldGrace, "hold-grace", 2*time.Minute, "how long after a node's last acquire of a lease its heartbeat's report of the VNIs it uses must still lack the lease's VNI before the node's hold is dropped (0: never drop)")
	fs.IntVar(&c.GRPCMaxConnections, "grpc-max-connections", grpcapi.DefaultLimits.MaxConnections, "most open connections to the gRPC API, of all clients together; more are closed at once (0: no bound)")
	fs.IntVar(&c.GRPCMaxConnectionsPerHost, "grpc-max-connections-per-host", grpcapi.DefaultLimits.MaxConnectionsPerHost, "most open connections to the gRPC API from one IP address: every pod reaches the port, an agent needs one (0: no bound)")
	fs.Float64Var(&c.GRPCCallsPerSecond, "grpc-calls-per-second", grpcapi.DefaultLimits.CallsPerSecond, "calls per second on one gRPC connection, burst twice that, checked before authentication; more are answered Unavailable (0: no bound)")
	fs.IntVar(&c.MaxLeasesPerNamespace, "max-leases-per-namespace", 256, "most VNI leases the jobs, claims and pods of one namespace may hold, so that one namespace cannot drain the range (0: no cap)")
	fs.StringVar(&c.OwnerKinds, "owner-kinds", owner.FormatKinds(owner.DefaultKinds), "owner kinds a pod's VNI is keyed by, comma-separated group/version/Kind=resource")
	fs.StringVar(&c.DRABindingConditions, "dra-binding-conditions", "", "DRA driver `name` (the agents' --dra-driver-name, cxi.slingshot.hpe.com) whose claims' binding conditions this controller writes: it leases a claim's VNI for the node the claim is allocated on before the scheduler binds its pod, as the agents' --dra-binding-conditions asks; empty: none")
	fs.BoolVar(&c.DRAPodGroupClaims, "dra-podgroup-claims", false, "with --dra-binding-conditions, lease the VNI of the PodGroup claim a waiting claim's pod holds (a claim of the fabric's VNI device), as the agents' --dra-podgroup-claims does: each waiting claim then costs a read of its pod and of the pod's other claims")
	fs.DurationVar(&c.DRANodeStale, "dra-node-stale", 30*time.Second, "with --dra-binding-conditions, how long a node's agent may go without a heartbeat before the bindings of pods to it fail (VNILeaseFailed, NodeAgentUnreachable) and the scheduler tries elsewhere; keep it above the agents' --controller-heartbeat")
	fs.BoolVar(&c.NoKube, "no-kube", false, "run without a Kubernetes API: every VNI is pod-scoped, no claims, no token auth")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	fs.Float64Var(&c.APIQPS, "api-qps", defaultAPIQPS, "requests per second of each of the controller's Kubernetes clients (owner look-ups, the kube store, the node watch, the VNIClaims' status), each its own bucket; the TokenReviews and the leader election have their own")
	fs.IntVar(&c.APIBurst, "api-burst", defaultAPIBurst, "burst of each client above --api-qps")
	fs.StringVar(&c.Auth, "auth", "tokenreview", "how agents authenticate: tokenreview (projected ServiceAccount token), mtls (client certificates), none")
	fs.StringVar(&c.AgentServiceAccounts, "agent-service-accounts", "system:serviceaccount:slingshot:slingshot-agent", "users accepted by --auth tokenreview, comma-separated")
	fs.StringVar(&c.TokenAudiences, "token-audiences", "", "audiences a token must carry for --auth tokenreview, comma-separated; empty: the API server's")
	fs.Float64Var(&c.TokenReviewQPS, "token-review-qps", auth.DefaultReviewQPS, "TokenReviews per second, on a Kubernetes client of their own, apart from the leader election's")
	fs.IntVar(&c.TokenReviewBurst, "token-review-burst", auth.DefaultReviewBurst, "burst of TokenReviews above --token-review-qps")
	fs.DurationVar(&c.TokenReviewTTL, "token-review-cache-ttl", 30*time.Second, "how long an agent token's accepted review is reused, never past the token's expiry: a deleted agent pod's token is refused within it")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "server certificate file of the gRPC API (with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "server key file of the gRPC API")
	fs.StringVar(&c.ClientCA, "client-ca", "", "CA file that signs agent certificates, for --auth mtls")
	fs.StringVar(&c.MTLSPrefix, "mtls-prefix", "slingshot-agent:", "common-name prefix of agent certificates, CN <prefix><node>: the rest names the node the agent may act for")
	fs.BoolVar(&c.AllowUnboundAgents, "allow-unbound-agents", false, "development only: let an agent whose credential names no node (a token without the node-name extra, Kubernetes before 1.30; a certificate CN of the bare prefix) act for every node; without it such an agent is refused every node-scoped call")
	fs.StringVar(&c.HWColl.FMURL, "hwcoll-fm-url", "", "HPE Slingshot fabric manager URL: reserve hardware collectives (multicast addresses) for each job lease and pass them to its pods as FI_CXI_COLL_*; empty disables")
	fs.StringVar(&c.HWColl.JobFMURL, "hwcoll-job-fm-url", "", "the fabric manager's URL as the jobs' pods reach it (FI_CXI_COLL_FABRIC_MGR_URL, with /fabric/collectives/multicasts); empty: --hwcoll-fm-url")
	fs.StringVar(&c.HWColl.JobPrefix, "hwcoll-job-prefix", "k8s", "prefix of the controller's job IDs at the fabric manager (<prefix>-<owner UID>); only those are released by its reconcile, so clusters sharing a fabric manager need distinct ones")
	fs.IntVar(&c.HWColl.AddrsPerJob, "hwcoll-addrs-per-job", 8, "multicast addresses reserved per job (FI_CXI_HWCOLL_ADDRS_PER_JOB)")
	fs.IntVar(&c.HWColl.MinNodes, "hwcoll-min-nodes", 2, "fewest nodes a collective spans for libfabric to use the hardware (FI_CXI_HWCOLL_MIN_NODES)")
	fs.StringVar(&c.HWColl.OAuthDir, "hwcoll-oauth-dir", "", "directory of the fabric manager's OAuth client credentials: files endpoint (token URL), client-id, client-secret (a mounted Secret; read at each token fetch); empty: no OAuth")
	fs.StringVar(&c.HWColl.CAFile, "hwcoll-ca", "", "CA file that signs the fabric manager's (and token endpoint's) certificate; empty: the system's roots")
	fs.StringVar(&c.HWColl.CertFile, "hwcoll-cert", "", "client certificate file for mTLS to the fabric manager (with --hwcoll-key; read at each handshake)")
	fs.StringVar(&c.HWColl.KeyFile, "hwcoll-key", "", "client key file for mTLS to the fabric manager")
	fs.DurationVar(&c.HWColl.ReconcileInterval, "hwcoll-reconcile-interval", time.Minute, "how often the fabric manager's reservations are listed and those of no lease released (also at every start and takeover)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "json or text")
	fs.BoolVar(&c.ShowVersion, flagenv.VersionFlag, false, "print the version, commit, build date and Go version, and exit")
	fs.Usage = flagenv.Usage(fs, envPrefix, "Usage: slingshot-controller [flags]\n\n"+
		"The Slingshot cluster controller: job VNI leases, node slices, gRPC API for agents, Metacontroller hooks.")
	return fs
}

func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Validate checks the configuration and fills in its parsed forms; it
// returns every problem joined.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	vr, pr, pools := c.validateRanges(add)
	c.validateStore(add)
	c.validateLimits(add)
	c.validateAuth(add)
	c.validateLogging(add)
	c.validateHWColl(add)
	c.controller = controller.Config{VNIRange: vr, PodVNIRange: pr, PodVNISliceSize: c.PodVNISliceSize, IPPools: pools,
		Quarantine: c.Quarantine, SliceTTL: c.SliceTTL, SliceGrace: c.SliceGrace, SweepInterval: c.SweepInterval, HoldGrace: c.HoldGrace,
		MaxLeasesPerNamespace: c.MaxLeasesPerNamespace}
	if c.Quarantine == 0 {
		c.controller.Quarantine = -1 // explicitly none
	}
	if c.HoldGrace == 0 {
		c.controller.HoldGrace = -1 // explicitly never
	}
	if len(errs) == 0 {
		if err := c.controller.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// problems collects Validate's findings, each formatted as fmt.Errorf does.
type problems func(format string, a ...any)

// validateRanges parses the VNI ranges, the IP pools and the owner kinds,
// and checks the gRPC address.
func (c *Config) validateRanges(add problems) (vr, pr vnialloc.Range, pools []slices.PoolSpec) {
	vr, err := vnialloc.ParseRange(c.VNIRange)
	if err != nil {
		add("--vni-range: %w", err)
	} else if vr.Empty() {
		add("--vni-range: empty")
	}
	pr, err = vnialloc.ParseRange(c.PodVNIRange)
	if err != nil {
		add("--pod-vni-range: %w", err)
	}
	for _, p := range splitList(c.IPPools) {
		spec, err := slices.ParseIPPool(p)
		if err != nil {
			add("--ip-pools: %w", err)
			continue
		}
		pools = append(pools, spec)
	}
	c.kinds, err = owner.ParseKinds(c.OwnerKinds)
	if err != nil {
		add("--owner-kinds: %w", err)
	}
	if c.GRPCAddr == "" {
		add("--grpc-addr: empty")
	}
	return vr, pr, pools
}

// validateStore checks the store and leader election.
func (c *Config) validateStore(add problems) {
	if p, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		c.Store, c.DB = "sqlite", p
	}
	switch c.Store {
	case "sqlite":
		if c.DB == "" {
			add("--db: empty")
		}
		if c.LeaderElect {
			add("--leader-elect needs --store kube: a sqlite file has one writer")
		}
	case "kube":
		if c.NoKube {
			add("--store kube needs the Kubernetes API (not --no-kube)")
		}
	default:
		add("--store %q: want sqlite or kube", c.Store)
	}
	if c.LeaderElect {
		// Namespace and identity are filled in at run time; check timing.
		e := c.election("ns")
		e.Identity = "id"
		if err := e.Validate(); err != nil {
			add("--leader-elect: %w", err)
		}
	}
}

// validateLimits checks the durations and counts, and that the TLS
// certificate and key come together.
func (c *Config) validateLimits(add problems) {
	if c.Quarantine < 0 {
		add("--quarantine: negative")
	}
	if c.HoldGrace < 0 {
		add("--hold-grace: must not be negative")
	}
	if c.MaxLeasesPerNamespace < 0 {
		add("--max-leases-per-namespace: must not be negative")
	}
	if c.GRPCMaxConnections < 0 || c.GRPCMaxConnectionsPerHost < 0 || c.GRPCCallsPerSecond < 0 {
		add("--grpc-max-connections, --grpc-max-connections-per-host, --grpc-calls-per-second: must not be negative")
	}
	if c.APIQPS <= 0 || c.APIBurst < 1 {
		add("--api-qps and --api-burst: want positive")
	}
	if c.SweepInterval <= 0 {
		add("--sweep-interval: must be positive")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		add("--tls-cert and --tls-key go together")
	}
	if c.DRABindingConditions != "" {
		if c.NoKube {
			add("--dra-binding-conditions needs the Kubernetes API")
		}
		if errs := validation.IsDNS1123Subdomain(c.DRABindingConditions); len(errs) > 0 || len(c.DRABindingConditions) > 63 {
			add("--dra-binding-conditions %q: want a DRA driver name, a lower-case DNS subdomain of at most 63 characters", c.DRABindingConditions)
		}
		if c.DRANodeStale < time.Second {
			add("--dra-node-stale %v: want at least 1s", c.DRANodeStale)
		}
	} else if c.DRAPodGroupClaims {
		add("--dra-podgroup-claims: only with --dra-binding-conditions (a PodGroup claim's VNI needs no flag otherwise)")
	}
}

// validateAuth checks the agents' authentication and what it needs.
func (c *Config) validateAuth(add problems) {
	switch c.Auth {
	case "tokenreview":
		if c.NoKube {
			add("--auth tokenreview needs the Kubernetes API; use --auth mtls or none with --no-kube")
		}
		if len(splitList(c.AgentServiceAccounts)) == 0 {
			add("--agent-service-accounts: empty")
		}
		if c.TokenReviewQPS <= 0 || c.TokenReviewBurst < 1 {
			add("--token-review-qps and --token-review-burst: want positive")
		}
		if c.TokenReviewTTL <= 0 {
			add("--token-review-cache-ttl: want positive")
		}
	case "mtls":
		if c.TLSCert == "" || c.ClientCA == "" {
			add("--auth mtls needs --tls-cert, --tls-key and --client-ca")
		}
	case "none":
		if c.AllowUnboundAgents {
			add("--allow-unbound-agents needs --auth tokenreview or mtls: with none no agent is bound anyway")
		}
	default:
		add("--auth %q: want tokenreview, mtls or none", c.Auth)
	}
}

// validateLogging checks the log level and format.
func (c *Config) validateLogging(add problems) {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		add("--log-format %q: want json or text", c.LogFormat)
	}
}

// HWCollFlags are the --hwcoll-* flags: hardware collectives at the
// fabric manager, off unless FMURL is set.
type HWCollFlags struct {
	FMURL, JobFMURL, JobPrefix string
	AddrsPerJob, MinNodes      int
	OAuthDir                   string
	CAFile, CertFile, KeyFile  string
	ReconcileInterval          time.Duration
}

// validateHWColl checks the --hwcoll-* flags; they are checked only when
// --hwcoll-fm-url enables collectives.
func (c *Config) validateHWColl(add problems) {
	h := c.HWColl
	if h.FMURL == "" {
		return
	}
	for name, v := range map[string]string{"--hwcoll-fm-url": h.FMURL, "--hwcoll-job-fm-url": h.JobFMURL} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("%s %q: want http(s)://host[:port]", name, v)
		}
	}
	if (h.CertFile == "") != (h.KeyFile == "") {
		add("--hwcoll-cert and --hwcoll-key go together")
	}
	if h.AddrsPerJob < 1 || h.MinNodes < 1 {
		add("--hwcoll-addrs-per-job and --hwcoll-min-nodes: want at least 1")
	}
	if h.ReconcileInterval <= 0 {
		add("--hwcoll-reconcile-interval: want positive")
	}
	if !hwcollPrefixRE.MatchString(h.JobPrefix) {
		add("--hwcoll-job-prefix %q: want a DNS label", h.JobPrefix)
	}
	if c.NoKube {
		add("--hwcoll-fm-url needs the Kubernetes API: without it no lease is a job's")
	}
}

var hwcollPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// collectives returns the controller's collectives configuration, its
// fabric manager client made from the flags; nil when they are off.
func (h HWCollFlags) collectives() (*controller.CollectivesConfig, error) {
	if h.FMURL == "" {
		return nil, nil
	}
	fm, err := hwcoll.New(hwcoll.Options{URL: h.FMURL, OAuthDir: h.OAuthDir, CAFile: h.CAFile, CertFile: h.CertFile, KeyFile: h.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("hardware collectives: %w", err)
	}
	jobURL := h.JobFMURL
	if jobURL == "" {
		jobURL = h.FMURL
	}
	return &controller.CollectivesConfig{FM: fm, JobPrefix: h.JobPrefix, AddrsPerJob: h.AddrsPerJob, MinNodes: h.MinNodes,
		JobURL: jobURL, ReconcileInterval: h.ReconcileInterval}, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/slingshot-k8s/slingshot/controller/leader"
	"github.com/slingshot-k8s/slingshot/controller/slices"
	"github.com/slingshot-k8s/slingshot/controller/store"
	"github.com/slingshot-k8s/slingshot/controller/store/kube"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// saNamespaceFile holds the pod's namespace in a cluster.
const saNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// The default rate of each of the controller's Kubernetes clients. The
// one that spends it in bursts is the owner resolver: one read per
// AcquireJobVNI (the pod; its owners are cached), served from the API
// server's watch cache, which costs the API server no etcd round trip and
// well under a millisecond of CPU; a gang start of 4,096 pods then reads
// for 2 s at most (a burst of 2,000, then 1,000 a second) instead of 20 s
// at client-go's 5 a second, and the API server's own priority and
// fairness still shares it out among clients. A token the limiter cannot
// grant within the call's deadline is refused at once, without being
// spent, and the agent retries: one read per acquire means every token
// spent is an acquire answered.
const defaultAPIQPS, defaultAPIBurst = 1000, 2000

// kubeConfig builds the client config from a kubeconfig file, or the
// in-cluster config when path is empty, with a rate limit of qps requests
// a second, bursts of burst (--api-qps, --api-burst): client-go's default
// of 5, bursts of 10, would cap the pod look-ups of acquires at 5 a
// second cluster-wide.
func kubeConfig(path string, qps float64, burst int) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	rc.UserAgent = "slingshot-controller"
	rc.QPS, rc.Burst = float32(qps), burst
	return rc, nil
}

// storeDefaults fills the kube store's namespace (this pod's) and this
// replica's identity (the host name, which is the pod name in a cluster).
func (c *Config) storeDefaults() error {
	if c.StoreNamespace == "" {
		b, err := os.ReadFile(saNamespaceFile)
		if err != nil {
			return fmt.Errorf("--store-namespace is empty and the pod's namespace is unknown: %w", err)
		}
		c.StoreNamespace = strings.TrimSpace(string(b))
	}
	if c.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--identity is empty: %w", err)
		}
		c.Identity = h
	}
	return nil
}

// election returns the leader election of the replicas in namespace ns.
func (c *Config) election(ns string) leader.Config {
	return leader.Config{Namespace: ns, Name: "slingshot-controller", Identity: c.Identity,
		LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod}
}

// openStore opens the store --store names; rc is nil with --no-kube.
func openStore(ctx context.Context, c *Config, rc *rest.Config, log *slog.Logger) (store.Store, error) {
	if c.Store == "kube" || c.LeaderElect {
		if err := c.storeDefaults(); err != nil {
			return nil, err
		}
	}
	switch c.Store {
	case "kube":
		if rc == nil {
			return nil, errors.New("--store kube needs the Kubernetes API")
		}
		st, err := kube.New(rc, kube.Options{Namespace: c.StoreNamespace, Identity: c.Identity, Logger: log, SliceRange: c.sliceRange})
		if err != nil {
			return nil, fmt.Errorf("kube store: %w", err)
		}
		log.Info("store", "kind", "kube", "namespace", c.StoreNamespace)
		return st, nil
	default:
		if err := os.MkdirAll(filepath.Dir(c.DB), 0o700); err != nil {
			return nil, fmt.Errorf("db directory: %w", err)
		}
		st, err := sqlite.Open(ctx, c.DB)
		if err != nil {
			return nil, err
		}
		log.Info("store", "kind", "sqlite", "db", c.DB)
		return st, nil
	}
}

// sliceRange renders slice i of pool for kubectl's Range column.
func (c *Config) sliceRange(pool string, i int) string {
	if pool == slices.PodVNIPool && !c.controller.PodVNIRange.Empty() {
		spec := slices.PoolSpec{Name: pool, VNIs: c.controller.PodVNIRange, SliceSize: c.controller.PodVNISliceSize}
		return spec.VNISlice(i).String()
	}
	for _, p := range c.controller.IPPools {
		if p.Name == pool {
			return p.PrefixSlice(i).String()
		}
	}
	return ""
}

// runTransfer runs the one-shot "export" and "import" commands, which
// move every lease between stores (see docs/configuration.md, the controller's export and import).
// Run them with the controller stopped.
func runTransfer(ctx context.Context, cmd string, args []string, getenv func(string) string, in io.Reader, out, errw io.Writer) error {
	c := &Config{}
	fs := flag.NewFlagSet("slingshot-controller "+cmd, flag.ContinueOnError)
	fs.SetOutput(errw)
	fs.StringVar(&c.Store, "store", "sqlite", "sqlite, sqlite:PATH or kube")
	fs.StringVar(&c.DB, "db", "/var/lib/slingshot-controller/controller.db", "sqlite database file (--store sqlite)")
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the kube store; empty: this pod's namespace")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	batch := fs.Int("batch", 256, "records per commit (import)")
	fs.Usage = func() {
		if cmd == "export" {
			fmt.Fprintf(errw, "Usage: slingshot-controller export --store sqlite:PATH|kube [flags] > leases.json\n\nWrites every lease, quarantined VNI, node slice and meta value of the store as JSON.\n\n")
		} else {
			fmt.Fprintf(errw, "Usage: slingshot-controller import --store kube|sqlite:PATH [flags] < leases.json\n\nWrites an export into the store (empty, or holding the same records from an interrupted import).\n\n")
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"store", "db", "store-namespace", "kubeconfig"} {
		if v := getenv(envName(name)); v != "" && !set[name] {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s: %w", envName(name), err)
			}
		}
	}
	if p, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		c.Store, c.DB = "sqlite", p
	}
	var rc *rest.Config
	switch c.Store {
	case "sqlite":
		if cmd == "export" {
			if _, err := os.Stat(c.DB); err != nil {
				return fmt.Errorf("export: %w", err)
			}
		}
	case "kube":
		var err error
		if rc, err = kubeConfig(c.Kubeconfig, defaultAPIQPS, defaultAPIBurst); err != nil {
			return err
		}
		c.Identity = cmd
	default:
		return fmt.Errorf("--store %q: want sqlite, sqlite:PATH or kube", c.Store)
	}
	log := slog.New(slog.NewTextHandler(errw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openStore(ctx, c, rc, log)
	if err != nil {
		return err
	}
	defer st.Close()
	if cmd == "export" {
		return store.Export(ctx, st, out)
	}
	res, err := store.Import(ctx, st, in, *batch)
	fmt.Fprintf(errw, "imported %d records (%d already present)\n", res.Written, res.Present)
	return err
}

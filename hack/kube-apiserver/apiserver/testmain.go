package apiserver

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// RunTests is a test binary's main on a real control plane: it starts
// etcd and kube-apiserver, installs the CRDs pattern names in crds, and
// returns run's exit code. The binaries are $KUBE_APISERVER (default
// ../bin/kube-apiserver, from the test's package directory) and $ETCD
// (default /usr/bin/etcd). Where one is missing the tests are skipped
// (code 0), unless $E2E_K8S_REQUIRED is set: then they fail, so that CI
// cannot pass without them. name starts every message; hint says how to
// get the binaries. When run fails, the servers' logs are kept and their
// paths printed.
func RunTests(name, hint string, crds fs.FS, pattern string, run func(*Server) int) int {
	bin := os.Getenv("KUBE_APISERVER")
	if bin == "" {
		bin, _ = filepath.Abs(filepath.Join("..", "bin", "kube-apiserver"))
	}
	etcd := os.Getenv("ETCD")
	if etcd == "" {
		etcd = "/usr/bin/etcd"
	}
	for _, b := range []string{bin, etcd} {
		if _, err := os.Stat(b); err != nil {
			if os.Getenv("E2E_K8S_REQUIRED") != "" {
				fmt.Fprintf(os.Stderr, "%s: %v (%s)\n", name, err, hint)
				return 1
			}
			fmt.Fprintf(os.Stderr, "%s: skipped: %v; %s\n", name, err, hint)
			return 0
		}
	}
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	start := time.Now()
	srv, err := Start(ctx, Options{KubeAPIServer: bin, Etcd: etcd, Dir: dir, Args: []string{
		// PodGroups and their claims (beta, off by default in 1.37), for
		// the pods of TestBindingConditionsBacklog's group variant.
		"--feature-gates=GenericWorkload=true,DRAWorkloadResourceClaims=true",
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer srv.Stop()
	if err := srv.InstallCRDs(ctx, crds, pattern); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "%s: kube-apiserver %s on etcd %s ready in %v\n", name, srv.URL, srv.EtcdURL, time.Since(start).Round(time.Millisecond))
	code := run(srv)
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: logs: %s, %s\n", name, srv.APIServerLog, srv.EtcdLog)
		// Keep the logs for the failure report: the directory goes.
		if keep, err := os.MkdirTemp("", name+"-logs"); err == nil {
			for _, p := range []string{srv.APIServerLog, srv.EtcdLog} {
				if b, err := os.ReadFile(p); err == nil {
					_ = os.WriteFile(filepath.Join(keep, filepath.Base(p)), b, 0o644)
				}
			}
			fmt.Fprintf(os.Stderr, "%s: logs kept in %s\n", name, keep)
		}
	}
	return code
}

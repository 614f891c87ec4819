package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slingshot-k8s/slingshot/hack/kube-apiserver/apiserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	wbModule  = "github.com/k8snetworkplumbingwg/whereabouts"
	nadModule = "github.com/k8snetworkplumbingwg/network-attachment-definition-client"
	// wbNamespace holds whereabouts' objects: its kubeconfig's context
	// names it, as the DaemonSet's does, and its controller is told it.
	wbNamespace = "kube-system"
	// nadNamespace holds the NetworkAttachmentDefinition.
	nadNamespace = "default"
	network      = "hsn"
)

var (
	nodeSlicePools = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "nodeslicepools"}
	ipPools        = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"}
	reservations   = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "overlappingrangeipreservations"}
	nads           = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
)

type wbOptions struct {
	// Version of whereabouts' module; KubeAPIServer and Etcd the binaries;
	// Dir the work directory.
	Version, KubeAPIServer, Etcd, Dir string
}

// setupWhereabouts builds whereabouts' plugin and node-slice controller
// from the module proxy (in the module's own directory, with its own
// go.mod and go.sum), starts etcd and kube-apiserver, installs
// whereabouts' CRDs and the NetworkAttachmentDefinition CRD from their
// module sources, creates the node and a NetworkAttachmentDefinition with
// node_slice_size, and runs the controller until it has assigned the node
// its slice.
func setupWhereabouts(ctx context.Context, o wbOptions) (*plugin, func(), error) {
	for _, b := range []string{o.KubeAPIServer, o.Etcd} {
		if _, err := os.Stat(b); err != nil {
			return nil, nil, fmt.Errorf("%v (make kube-apiserver builds hack/kube-apiserver/bin/kube-apiserver and installs etcd-server)", err)
		}
	}
	binDir := filepath.Join(o.Dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, nil, err
	}
	wb, err := goModDownload(ctx, o.Dir, wbModule+"@"+o.Version)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	if err := goBuild(ctx, wb.Dir, nil, binDir+"/", "./cmd", "./cmd/nodeslicecontroller"); err != nil {
		return nil, nil, err
	}
	buildTook := time.Since(start)
	bin := filepath.Join(binDir, "whereabouts")
	if err := os.Rename(filepath.Join(binDir, "cmd"), bin); err != nil {
		return nil, nil, err
	}
	nad, err := goListModule(ctx, wb.Dir, nadModule)
	if err != nil {
		return nil, nil, err
	}

	k8sDir := filepath.Join(o.Dir, "k8s")
	if err := os.MkdirAll(k8sDir, 0o755); err != nil {
		return nil, nil, err
	}
	start = time.Now()
	srv, err := apiserver.Start(ctx, apiserver.Options{KubeAPIServer: o.KubeAPIServer, Etcd: o.Etcd, Dir: k8sDir})
	if err != nil {
		return nil, nil, err
	}
	var ctl *exec.Cmd
	var ctlDone chan error
	done := func() {
		if ctl != nil {
			_ = ctl.Process.Signal(syscall.SIGTERM)
			select {
			case <-ctlDone:
			case <-time.After(10 * time.Second):
				_ = ctl.Process.Kill()
				<-ctlDone
			}
		}
		srv.Stop()
	}
	fail := func(err error) (*plugin, func(), error) { return nil, done, err }
	upTook := time.Since(start)
	if err := srv.InstallCRDs(ctx, os.DirFS(filepath.Join(wb.Dir, "doc", "crds")), "whereabouts.cni.cncf.io_*.yaml"); err != nil {
		return fail(err)
	}
	if err := srv.InstallCRDs(ctx, os.DirFS(filepath.Join(nad.Dir, "artifacts")), "networks-crd.yaml"); err != nil {
		return fail(err)
	}

	// The kubeconfig and flat file whereabouts' install-cni.sh writes.
	kubeconfig := filepath.Join(o.Dir, "whereabouts.kubeconfig")
	if err := writeKubeconfig(kubeconfig, srv); err != nil {
		return fail(err)
	}
	flat := filepath.Join(o.Dir, "whereabouts.conf")
	flatConf, _ := json.Marshal(map[string]any{"datastore": "kubernetes", "kubernetes": map[string]string{"kubeconfig": kubeconfig}})
	if err := os.WriteFile(flat, flatConf, 0o600); err != nil {
		return fail(err)
	}
	// The network: the NAD's config is what the runtime hands the main
	// plugin, which hands it on to whereabouts.
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":%q,"type":"macvlan","master":"hsn0",`+
		`"ipam":{"type":"whereabouts","range":%q,"node_slice_size":"/%d","configuration_path":%q}}`,
		network, hsn0.Prefix, hsn0.SliceBits, flat)

	kc, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		return fail(err)
	}
	dc, err := dynamic.NewForConfig(srv.Config)
	if err != nil {
		return fail(err)
	}
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create node: %w", err))
	}
	nadObj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": network, "namespace": nadNamespace},
		"spec":     map[string]any{"config": string(conf)},
	}}
	if _, err := dc.Resource(nads).Namespace(nadNamespace).Create(ctx, nadObj, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create network-attachment-definition: %w", err))
	}

	ctlLog := filepath.Join(o.Dir, "nodeslicecontroller.log")
	logf, err := os.Create(ctlLog)
	if err != nil {
		return fail(err)
	}
	ctl = exec.Command(filepath.Join(binDir, "nodeslicecontroller"), "--kubeconfig", kubeconfig)
	ctl.Env = append(os.Environ(), "WHEREABOUTS_NAMESPACE="+wbNamespace)
	ctl.Stdout, ctl.Stderr = logf, logf
	ctl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctl.Start(); err != nil {
		logf.Close()
		ctl = nil
		return fail(err)
	}
	ctlDone = make(chan error, 1)
	go func() { ctlDone <- ctl.Wait(); logf.Close() }()

	start = time.Now()
	slice, err := waitForSlice(ctx, dc, ctlDone, ctlLog)
	if err != nil {
		return fail(err)
	}
	sliceTook := time.Since(start)

	kver, _ := exec.Command(o.KubeAPIServer, "--version").Output()
	ever, _ := exec.Command(o.Etcd, "--version").Output()
	eline, _, _ := strings.Cut(string(ever), "\n")
	p := &plugin{
		name: "whereabouts",
		about: fmt.Sprintf("%s %s (go build in its module from the module proxy: %v, Go's build cache warm or not), node_slice_size /%d, node %s's slice %v assigned by its nodeslicecontroller in %v; kube-apiserver %s (up in %v), %s",
			wbModule, wb.Version, buildTook.Round(100*time.Millisecond), hsn0.SliceBits, nodeName, slice, sliceTook.Round(time.Millisecond),
			strings.TrimSpace(string(kver)), upTook.Round(time.Millisecond), strings.TrimSpace(eline)),
		bin:     bin,
		cniPath: binDir,
		netns:   filepath.Join(o.Dir, "no-netns"),
		conf:    conf,
		counters: func(ctx context.Context) (map[string]float64, error) {
			return requestsByVerb(ctx, kc)
		},
		// The plugin learns its node from NODENAME (else /etc/hostname),
		// as the DaemonSet sets it.
		env:     []string{"NODENAME=" + nodeName},
		inRange: within(slice),
		verify: func(ctx context.Context) error {
			pools, err := dc.Resource(ipPools).Namespace(wbNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pools.Items) == 0 {
				return errors.New("no IPPool")
			}
			for _, p := range pools.Items {
				if a, _, _ := unstructured.NestedMap(p.Object, "spec", "allocations"); len(a) != 0 {
					return fmt.Errorf("IPPool %s still has %d allocations", p.GetName(), len(a))
				}
			}
			res, err := dc.Resource(reservations).Namespace(wbNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(res.Items) != 0 {
				return fmt.Errorf("%d OverlappingRangeIPReservations left", len(res.Items))
			}
			return nil
		},
	}
	return p, done, nil
}

// waitForSlice waits until the controller's NodeSlicePool assigns the
// node a slice and returns it.
func waitForSlice(ctx context.Context, dc dynamic.Interface, ctlDone chan error, ctlLog string) (netip.Prefix, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-ctlDone:
			ctlDone <- err
			b, _ := os.ReadFile(ctlLog)
			return netip.Prefix{}, fmt.Errorf("nodeslicecontroller exited: %v\n%s", err, b)
		default:
		}
		u, err := dc.Resource(nodeSlicePools).Namespace(wbNamespace).Get(ctx, network, metav1.GetOptions{})
		if err == nil {
			allocs, _, _ := unstructured.NestedSlice(u.Object, "status", "allocations")
			for _, a := range allocs {
				m, _ := a.(map[string]any)
				if m["nodeName"] == nodeName {
					s, _ := m["sliceRange"].(string)
					return netip.ParsePrefix(s)
				}
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(ctlLog)
			return netip.Prefix{}, fmt.Errorf("no NodeSlicePool %s/%s assigning %s a slice within 2m (last error %v); controller's log:\n%s", wbNamespace, network, nodeName, err, b)
		}
		select {
		case <-ctx.Done():
			return netip.Prefix{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeKubeconfig writes a kubeconfig reaching srv as its admin, its
// context's namespace wbNamespace.
func writeKubeconfig(path string, srv *apiserver.Server) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: srv.URL, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: srv.Config.BearerToken}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "admin", Namespace: wbNamespace}
	cfg.CurrentContext = "bench"
	return clientcmd.WriteToFile(*cfg, path)
}

type module struct{ Path, Version, Dir string }

// goModDownload fetches mod@version through the module proxy (verified
// against go.sum's checksum database) and returns where it lies.
func goModDownload(ctx context.Context, dir, modVersion string) (module, error) {
	return goJSON(ctx, dir, "mod", "download", "-json", modVersion)
}

// goListModule returns the version of path that the module in dir
// selects, downloading it when needed.
func goListModule(ctx context.Context, dir, path string) (module, error) {
	if _, err := goJSON(ctx, dir, "mod", "download", "-json", path); err != nil {
		return module{}, err
	}
	return goJSON(ctx, dir, "list", "-m", "-json", path)
}

func goJSON(ctx context.Context, dir string, args ...string) (module, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return module{}, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var m module
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return module{}, fmt.Errorf("go %s: no module directory in %q (%v)", strings.Join(args, " "), out, err)
	}
	return m, nil
}

// requestsByVerb sums the API server's apiserver_request_total by verb.
func requestsByVerb(ctx context.Context, kc kubernetes.Interface) (map[string]float64, error) {
	b, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		_, verb, ok := strings.Cut(labels, `verb="`)
		if !ok {
			continue
		}
		verb, _, _ = strings.Cut(verb, `"`)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		out[verb] += v
	}
	if len(out) == 0 {
		return nil, errors.New("metrics: no apiserver_request_total")
	}
	return out, nil
}

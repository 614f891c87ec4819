package agent

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

func defaults(t *testing.T) Options {
	t.Helper()
	o := Options{Controller: "embedded"} // a binary with the embedded controller
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	o.NodeName = "node-1"
	return o
}

func TestOptionsValidate(t *testing.T) {
	if err := func() error { o := defaults(t); return o.Validate() }(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"relative state dir", func(o *Options) { o.StateDir = "state" }, "--state-dir"},
		{"driver", func(o *Options) { o.CXIDriver = "fake" }, "--cxi-driver"},
		{"controller", func(o *Options) { o.Controller = "controller" }, "--controller"},
		{"no controller", func(o *Options) { o.Controller = "" }, "--controller is required"},
		{"controller address", func(o *Options) { o.Controller = "slingshot-controller:7443" }, ""},
		{"node name", func(o *Options) { o.NodeName = "a/b" }, "--node-name"},
		{"cert without key", func(o *Options) { o.Controller = "c:1"; o.ControllerCert = "/c.pem" }, "go together"},
		{"token without TLS", func(o *Options) { o.Controller = "c:1"; o.ControllerTokenFile = "/t" }, "needs --controller-ca-file"},
		{"TLS for embedded", func(o *Options) { o.ControllerCA = "/ca.pem" }, "remote --controller"},
		{"insecure token", func(o *Options) { o.Controller = "c:1"; o.ControllerTokenFile = "/t"; o.ControllerInsecureToken = true }, ""},
		{"metrics", func(o *Options) { o.MetricsAddr = "9479" }, "--metrics-addr"},
		{"metrics off", func(o *Options) { o.MetricsAddr = "" }, ""},
		{"managed range", func(o *Options) { o.ManagedVNIs = "10-1" }, "--managed-vnis"},
		{"cri socket relative", func(o *Options) { o.CRISocket = "run/containerd/containerd.sock" }, "--cri-socket"},
		{"cri socket", func(o *Options) { o.CRISocket = "/run/k3s/containerd/containerd.sock" }, ""},
		{"cri none", func(o *Options) { o.CRISocket = CRINone }, ""},
		{"ipam socket relative", func(o *Options) { o.IPAMSocket = "run/ipam.sock" }, "--ipam-socket"},
		{"ipam socket too long", func(o *Options) { o.IPAMSocket = "/" + strings.Repeat("s", 107) }, "at most 107 bytes"},
		{"ipam socket off", func(o *Options) { o.IPAMSocket = "" }, ""},
		{"log level", func(o *Options) { o.LogLevel = "loud" }, "--log-level"},
		{"log format", func(o *Options) { o.LogFormat = "xml" }, "--log-format"},
		{"standalone device plugin", func(o *Options) { o.NoKube = true }, ""},
		{"DRA needs the API", func(o *Options) { o.NoKube = true; o.API = APIDRA }, "--api=dra needs the Kubernetes API"},
		{"binding conditions without DRA", func(o *Options) { o.DRABindingConditions = true }, "--dra-binding-conditions: only with --api=dra"},
		{"PodGroup claims without DRA", func(o *Options) { o.DRAPodGroupClaims = true }, "--dra-podgroup-claims: only with --api=dra"},
		{"PodGroup claims with DRA", func(o *Options) { o.API = APIDRA; o.DRAPodGroupClaims = true }, ""},
		{"no-kube with a kubeconfig", func(o *Options) { o.NoKube = true; o.Kubeconfig = "/k" }, "contradict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaults(t)
			tt.edit(&o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want mention of %s", err, tt.want)
			}
		})
	}
}

func TestOptionsComplete(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	host := func() (string, error) { return "host-a", nil }
	o := Options{}
	if err := o.Complete(env(map[string]string{"NODE_NAME": "from-env"}), host); err != nil || o.NodeName != "from-env" {
		t.Fatalf("NODE_NAME: %q, %v", o.NodeName, err)
	}
	o = Options{}
	if err := o.Complete(env(nil), host); err != nil || o.NodeName != "host-a" {
		t.Fatalf("hostname: %q, %v", o.NodeName, err)
	}
	o = Options{NodeName: "flag"}
	if err := o.Complete(env(map[string]string{"NODE_NAME": "x"}), host); err != nil || o.NodeName != "flag" {
		t.Fatalf("flag: %q, %v", o.NodeName, err)
	}
	o = Options{}
	if err := o.Complete(env(nil), func() (string, error) { return "", errors.New("no uts") }); err == nil {
		t.Fatal("no source of a node name accepted")
	}
}

func TestParseVNIRange(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi uint16
		ok     bool
	}{
		{"1024-65535", 1024, 65535, true},
		{"1-1", 1, 1, true},
		{"0-10", 0, 0, false},
		{"10-1", 0, 0, false},
		{"1024-65536", 0, 0, false},
		{"1024", 0, 0, false},
		{" 1-2", 0, 0, false},
		{"a-b", 0, 0, false},
	}
	for _, tt := range tests {
		lo, hi, err := ParseVNIRange(tt.in)
		if (err == nil) != tt.ok || lo != tt.lo || hi != tt.hi {
			t.Errorf("ParseVNIRange(%q) = %d, %d, %v", tt.in, lo, hi, err)
		}
	}
}

func FuzzParseVNIRange(f *testing.F) {
	for _, s := range []string{"1024-65535", "1-1", "-", "9999999999-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := ParseVNIRange(s)
		if err == nil && (lo == 0 || lo > hi) {
			t.Fatalf("ParseVNIRange(%q) = %d-%d accepted", s, lo, hi)
		}
	})
}

package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// renderOn renders values for a cluster serving also apiVersions and
// decodes every object, by "Kind/name".
func renderOn(t *testing.T, values map[string]any, apiVersions ...string) map[string]*Object {
	t.Helper()
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := Render(ch, values, apiVersions...)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*Object{}
	for _, m := range rendered {
		o, err := Decode([]byte(m.Content))
		if err != nil {
			t.Fatalf("%s: %v", m.Source, err)
		}
		if o != nil {
			objs[o.GVK.Kind+"/"+o.Name] = o
		}
	}
	return objs
}

// Issue 15, item 10: the agents' gRPC to the controller is TLS unless the
// values say plaintext: certificates from cert-manager where the cluster
// has it, else a CA and certificate the chart makes; the agents get the
// CA and never the insecure-token switch.
func TestIssue15Item10ChartTLSByDefault(t *testing.T) {
	tests := []struct {
		name        string
		values      map[string]any
		apiVersions []string
		tls         bool
		kinds       []string // objects the release must make
		noKinds     []string // objects it must not make
	}{
		{name: "defaults, no cert-manager", tls: true,
			kinds:   []string{"Secret/slingshot-controller-ca", "Secret/slingshot-controller-tls"},
			noKinds: []string{"Certificate/slingshot-controller", "Issuer/slingshot-controller-ca"}},
		{name: "defaults, cert-manager", apiVersions: []string{CertManagerAPI}, tls: true,
			kinds: []string{"Issuer/slingshot-controller-selfsigned", "Certificate/slingshot-controller-ca",
				"Issuer/slingshot-controller-ca", "Certificate/slingshot-controller"},
			noKinds: []string{"Secret/slingshot-controller-ca", "Secret/slingshot-controller-tls"}},
		{name: "provider helm despite cert-manager", apiVersions: []string{CertManagerAPI}, tls: true,
			values:  map[string]any{"controller": map[string]any{"tls": map[string]any{"provider": "helm"}}},
			kinds:   []string{"Secret/slingshot-controller-tls"},
			noKinds: []string{"Certificate/slingshot-controller"}},
		{name: "own Secret", tls: true,
			values:  map[string]any{"controller": map[string]any{"tls": map[string]any{"secretName": "mine"}}},
			noKinds: []string{"Secret/slingshot-controller-tls", "Certificate/slingshot-controller"}},
		{name: "plaintext, explicitly", apiVersions: []string{CertManagerAPI},
			values:  map[string]any{"controller": map[string]any{"tls": map[string]any{"enabled": false}}},
			noKinds: []string{"Secret/slingshot-controller-tls", "Certificate/slingshot-controller"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := renderOn(t, tt.values, tt.apiVersions...)
			for _, k := range tt.kinds {
				if objs[k] == nil {
					t.Errorf("no %s", k)
				}
			}
			for _, k := range tt.noKinds {
				if objs[k] != nil {
					t.Errorf("unexpected %s", k)
				}
			}
			var d appsv1.Deployment
			decode(t, objs["Deployment/slingshot-controller"], &d)
			args := d.Spec.Template.Spec.Containers[0].Args
			if got := slices.Contains(args, "--tls-cert=/etc/slingshot/tls/tls.crt"); got != tt.tls {
				t.Errorf("controller --tls-cert: %v, want %v (args %v)", got, tt.tls, args)
			}
			var ds appsv1.DaemonSet
			decode(t, objs["DaemonSet/slingshot-agent"], &ds)
			env := map[string]string{}
			for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if _, insecure := env["SLINGSHOT_AGENT_CONTROLLER_INSECURE_TOKEN"]; insecure == tt.tls {
				t.Errorf("agent's insecure token: %v with TLS %v", insecure, tt.tls)
			}
			if ca := env["SLINGSHOT_AGENT_CONTROLLER_CA_FILE"]; (ca != "") != tt.tls {
				t.Errorf("agent's controller CA file %q with TLS %v", ca, tt.tls)
			}
		})
	}
}

// The chart-made certificate is signed by the chart-made CA that the
// agents get, for the Service's name and the configured extra names.
func TestIssue15Item10ChartMadeCertificate(t *testing.T) {
	objs := renderOn(t, map[string]any{"controller": map[string]any{"tls": map[string]any{
		"dnsNames": []any{"controller.example"}, "ipAddresses": []any{"192.0.2.10"}}}})
	var ca, tls corev1.Secret
	decode(t, objs["Secret/slingshot-controller-ca"], &ca)
	decode(t, objs["Secret/slingshot-controller-tls"], &tls)
	if tls.Type != corev1.SecretTypeTLS || string(tls.Data["ca.crt"]) != string(ca.Data["tls.crt"]) {
		t.Fatalf("the controller's Secret: type %s, its ca.crt is not the CA's certificate", tls.Type)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(tls.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(tls.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"slingshot-controller.slingshot.svc", "slingshot-controller.slingshot.svc.cluster.local", "controller.example", "192.0.2.10"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}
	var d appsv1.Deployment
	decode(t, objs["Deployment/slingshot-controller"], &d)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "slingshot-controller-ca" {
			t.Errorf("the controller mounts the CA's Secret (its key): %+v", v)
		}
	}
	var ds appsv1.DaemonSet
	decode(t, objs["DaemonSet/slingshot-agent"], &ds)
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		for _, it := range v.Secret.Items {
			if strings.HasSuffix(it.Key, ".key") {
				t.Errorf("the agent mounts a private key: %+v", v)
			}
		}
		if len(v.Secret.Items) == 0 {
			t.Errorf("the agent mounts a whole Secret: %+v", v)
		}
	}
}

func decode(t *testing.T, o *Object, into any) {
	t.Helper()
	if o == nil {
		t.Fatal("object missing")
	}
	if err := json.Unmarshal(o.JSON, into); err != nil {
		t.Fatal(err)
	}
}

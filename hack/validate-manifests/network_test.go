package main

import (
	"os"
	"strings"
	"testing"
)

// decodeAll decodes a YAML stream and fails the test on error.
func decodeAll(t *testing.T, stream string) []*Object {
	t.Helper()
	var objs []*Object
	for _, doc := range splitDocuments([]byte(stream)) {
		o, err := Decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

func nad(name, config string) string {
	return "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: " + name + ", namespace: default}\nspec:\n  config: '" + config + "'\n"
}

func pod(annotations string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n  annotations:\n" + annotations + "spec: {containers: [{name: c, image: i}]}\n"
}

const hsn0 = `{"cniVersion": "1.0.0", "name": "hsn0", "type": "macvlan", "master": "hsn0", "capabilities": {"ips": true},
  "ipam": {"type": "slingshot-ipam", "pool": "hsn0"}}`

// CheckNetworks: slingshot-ipam's network configurations, and the pods'
// requests in their annotations and Multus selections, each through the
// plugin's or the agent's parser.
func TestCheckNetworks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		want   string // "" for no error
	}{
		{name: "network and a pod's request", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "interface": "hsn0", "ips": ["10.150.4.7/16"], "cni-args": {"pool": "hsn0", "ip": "10.150.4.7", "interface": "hsn0", "netdev": "hsn0"}}]'`+"\n")},
		// Issue 24: a typo of a key was ignored and an address handed out.
		{name: "cni-args with an unknown key", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "cni-args": {"subnett": "10.150.4.0/24"}}]'`+"\n"),
			want: `slingshot-ipam would refuse the pod's request: args.cni: unknown field "subnett"`},
		{name: "another ipam is not ours", stream: nad("n", `{"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "ipam": {"type": "host-local", "pools": 1}}`)},
		{name: "no config: a file on the node", stream: "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: n, namespace: default}\n"},
		{name: "config not JSON", stream: nad("n", `{"name": `), want: "spec.config is not a JSON object"},
		{name: "unknown ipam key", stream: nad("n", `{"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "ipam": {"type": "slingshot-ipam", "pools": "hsn0"}}`),
			want: "slingshot-ipam refuses it"},
		{name: "no pool", stream: nad("n", `{"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "ipam": {"type": "slingshot-ipam"}}`), want: "ipam.pool is required"},
		{name: "a list's plugin", stream: nad("n", `{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "ipam": {"type": "slingshot-ipam", "pool": "hsn0", "timeout": "1h"}}, {"type": "tuning"}]}`),
			want: `ipam.timeout "1h"`},
		{name: "annotation", stream: pod(`    slingshot.hpe.com/network: '{"pool":"hsn0","ip":"10.150.3.7"}'` + "\n")},
		{name: "annotation with an unknown field", stream: pod(`    slingshot.hpe.com/network: '{"address":"10.150.3.7"}'` + "\n"),
			want: `metadata.annotations: invalid network request`},
		{name: "a Job's template", stream: "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: default}\nspec:\n  template:\n    metadata:\n      annotations:\n        slingshot.hpe.com/network: '{\"subnet\":\"10.150.3.1/24\"}'\n",
			want: "spec.template.metadata.annotations: invalid network request: subnet 10.150.3.1/24 has host bits set"},
		{name: "ips disagree with cni-args", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "ips": ["10.150.4.8/16"], "cni-args": {"ip": "10.150.4.7"}}]'`+"\n"),
			want: `(default/hsn0): slingshot-ipam would refuse the pod's request: conflicting ip`},
		{name: "interface disagrees with Multus' default", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "cni-args": {"interface": "hsn0"}}]'`+"\n"),
			want: `conflicting interface: args.cni.interface is "hsn0" but CNI_IFNAME is "net1"`},
		{name: "netdev disagrees with master", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "namespace": "default", "cni-args": {"netdev": "hsn1"}}]'`+"\n"),
			want: "conflicting netdev"},
		{name: "cni-args not a string", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "cni-args": {"ip": 7}}]'`+"\n"),
			want: "args.cni.ip is 7, not a string"},
		{name: "a network of another namespace is not the file's", stream: nad("hsn0", hsn0) + "---\n" +
			pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "hsn0", "namespace": "other", "cni-args": {"interface": "hsn0"}}]'`+"\n")},
		{name: "a network not in the file: cni-args alone", stream: pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": "elsewhere", "cni-args": {"ip": "10.150.3"}}]'` + "\n"),
			want: `(default/elsewhere): cni-args: invalid network request: ip "10.150.3"`},
		{name: "short form", stream: pod("    k8s.v1.cni.cncf.io/networks: hsn0,other/net@eth1\n")},
		{name: "broken JSON selection", stream: pod(`    k8s.v1.cni.cncf.io/networks: '[{"name": }]'` + "\n"), want: "is not a JSON list of network selections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := CheckNetworks(decodeAll(t, tc.stream))
			if tc.want == "" {
				for _, err := range errs {
					t.Errorf("unexpected: %v", err)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Errorf("errors %v; want one containing %q", errs, tc.want)
			}
		})
	}
}

// The examples pass, and the check reaches their requests: a broken
// address in either example is found.
func TestCheckNetworksExamples(t *testing.T) {
	for file, addr := range map[string]string{"hsn-multus.yaml": `"10.150.4.7"`, "hsn-interface.yaml": `"10.150.3.7"`} {
		data, err := os.ReadFile("../../" + examplesDir + "/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if errs := CheckNetworks(decodeAll(t, string(data))); len(errs) > 0 {
			t.Errorf("%s: %v", file, errs)
		}
		if !strings.Contains(string(data), addr) {
			t.Fatalf("%s no longer asks for %s", file, addr)
		}
		broken := strings.Replace(string(data), addr, `"10.150.300.7"`, 1)
		if errs := CheckNetworks(decodeAll(t, broken)); len(errs) != 1 || !strings.Contains(errs[0].Error(), "10.150.300.7") {
			t.Errorf("%s with a broken address: %v; want it found", file, errs)
		}
	}
}

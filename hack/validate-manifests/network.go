package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/slingshot-k8s/slingshot/cni/ipamplugin"
	"github.com/slingshot-k8s/slingshot/internal/netreq"
)

// Annotations a pod asks for its high-speed network interfaces with.
const (
	// multusNetworks is Multus' network selection annotation.
	multusNetworks = "k8s.v1.cni.cncf.io/networks"
	// nadKind is the Network Plumbing Working Group's network.
	nadGroup, nadKind = "k8s.cni.cncf.io", "NetworkAttachmentDefinition"
	// ipamType is the plugin's name in a network configuration.
	ipamType = "slingshot-ipam"
	// multusDefaultIfName is the first interface name Multus gives an
	// attachment without "interface".
	multusDefaultIfName = "net1"
)

// selection is an element of a JSON network selection annotation, the
// fields read here.
type selection struct {
	Name      string         `json:"name"`
	Namespace string         `json:"namespace"`
	Interface string         `json:"interface"`
	IPs       []string       `json:"ips"`
	CNIArgs   map[string]any `json:"cni-args"`
}

// CheckNetworks checks, with the plugin's and the agent's own parsers,
// what a set of objects (one file) asks of the high-speed network:
//
//   - a NetworkAttachmentDefinition whose configuration (or a plugin of
//     its list) has "ipam": {"type": "slingshot-ipam"} must be one
//     ipamplugin.ParseConfig accepts;
//   - a pod's, or a pod template's, slingshot.hpe.com/network annotation
//     must be one netreq.Parse accepts;
//   - a JSON network selection naming such a network of the set must
//     make the request the plugin would build from what Multus passes it
//     (cni-args as args.cni, ips as runtimeConfig.ips where the network
//     has the ips capability, interface as CNI_IFNAME); a selection of a
//     network outside the set has its cni-args checked with netreq.
func CheckNetworks(objs []*Object) []error {
	var errs []error
	nets := map[string][]map[string]any{} // namespace/name: slingshot-ipam plugin configurations
	for _, o := range objs {
		if o.GVK.Group != nadGroup || o.GVK.Kind != nadKind {
			continue
		}
		confs, err := ipamPlugins(o)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		for _, conf := range confs {
			data, _ := json.Marshal(conf)
			if _, err := ipamplugin.ParseConfig(data); err != nil {
				errs = append(errs, fmt.Errorf("%s: spec.config: slingshot-ipam refuses it: %w", o, err))
			}
		}
		if len(confs) > 0 {
			nets[o.Namespace+"/"+o.Name] = confs
		}
	}
	for _, o := range objs {
		for where, ann := range podAnnotations(o) {
			if v, ok := ann[netreq.Annotation]; ok {
				if _, err := netreq.Parse(v); err != nil {
					errs = append(errs, fmt.Errorf("%s: %s: %w", o, where, err))
				}
			}
			if v, ok := ann[multusNetworks]; ok {
				errs = append(errs, checkSelections(o, where, v, nets)...)
			}
		}
	}
	return errs
}

// ipamPlugins returns the configurations of the plugins of o's network
// that use slingshot-ipam, each as the runtime hands it to the plugin (a
// list's plugin with the list's name and cniVersion).
func ipamPlugins(o *Object) ([]map[string]any, error) {
	spec, _ := o.Map["spec"].(map[string]any)
	text, _ := spec["config"].(string)
	if text == "" {
		return nil, nil // a network named by a file on the node
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(text), &conf); err != nil {
		return nil, fmt.Errorf("spec.config is not a JSON object: %w", err)
	}
	plugins := []map[string]any{conf}
	if list, ok := conf["plugins"].([]any); ok {
		plugins = plugins[:0]
		for _, p := range list {
			if pm, ok := p.(map[string]any); ok {
				pm["name"], pm["cniVersion"] = conf["name"], conf["cniVersion"]
				plugins = append(plugins, pm)
			}
		}
	}
	var out []map[string]any
	for _, p := range plugins {
		if ipam, ok := p["ipam"].(map[string]any); ok && ipam["type"] == ipamType {
			out = append(out, p)
		}
	}
	return out, nil
}

// podAnnotations returns the annotations of o if it is a Pod, and of its
// pod template if it has one, by where they are.
func podAnnotations(o *Object) map[string]map[string]string {
	out := map[string]map[string]string{}
	get := func(meta any) map[string]string {
		m, _ := meta.(map[string]any)
		a, _ := m["annotations"].(map[string]any)
		s := map[string]string{}
		for k, v := range a {
			if str, ok := v.(string); ok {
				s[k] = str
			}
		}
		return s
	}
	if o.GVK.Group == "" && o.GVK.Kind == "Pod" {
		out["metadata.annotations"] = get(o.Map["metadata"])
	}
	if spec, ok := o.Map["spec"].(map[string]any); ok {
		if tmpl, ok := spec["template"].(map[string]any); ok {
			out["spec.template.metadata.annotations"] = get(tmpl["metadata"])
		}
	}
	return out
}

// checkSelections checks a JSON network selection annotation; the short
// form ("net1,ns/net2") carries no request and is left to Multus.
func checkSelections(o *Object, where, value string, nets map[string][]map[string]any) []error {
	if !strings.HasPrefix(strings.TrimSpace(value), "[") {
		return nil
	}
	var sels []selection
	if err := json.Unmarshal([]byte(value), &sels); err != nil {
		return []error{fmt.Errorf("%s: %s: %s is not a JSON list of network selections: %w", o, where, multusNetworks, err)}
	}
	var errs []error
	for i, s := range sels {
		ns := s.Namespace
		if ns == "" {
			ns = o.Namespace
		}
		at := fmt.Sprintf("%s: %s: %s[%d] (%s/%s)", o, where, multusNetworks, i, ns, s.Name)
		confs, known := nets[ns+"/"+s.Name]
		if !known {
			if s.CNIArgs == nil {
				continue
			}
			str := func(k string) string { v, _ := s.CNIArgs[k].(string); return v }
			if _, err := netreq.FromStrings(str("pool"), str("netdev"), str("interface"), str("subnet"), str("ip")); err != nil {
				errs = append(errs, fmt.Errorf("%s: cni-args: %w", at, err))
			}
			continue
		}
		ifName := s.Interface
		if ifName == "" {
			ifName = multusDefaultIfName
		}
		for _, conf := range confs {
			if err := requestOf(conf, s, ifName); err != nil {
				errs = append(errs, fmt.Errorf("%s: slingshot-ipam would refuse the pod's request: %w", at, err))
			}
		}
	}
	return errs
}

// requestOf builds the request slingshot-ipam would make of conf as Multus
// hands it over for selection s.
func requestOf(conf map[string]any, s selection, ifName string) error {
	c := make(map[string]any, len(conf)+2)
	for k, v := range conf {
		c[k] = v
	}
	if s.CNIArgs != nil {
		c["args"] = map[string]any{"cni": s.CNIArgs}
	}
	if caps, _ := conf["capabilities"].(map[string]any); caps["ips"] == true && len(s.IPs) > 0 {
		c["runtimeConfig"] = map[string]any{"ips": s.IPs}
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	cfg, err := ipamplugin.ParseConfig(data)
	if err != nil {
		return err
	}
	_, err = cfg.Request(ipamplugin.Args{}, ifName)
	return err
}

package ipamplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/slingshot-k8s/slingshot/internal/ipamwire"
)

// MaxTimeout bounds the configured call timeout: a runtime waits on the
// plugin, and a pod that waits minutes for an address is better failed
// and retried.
const MaxTimeout = 5 * time.Minute

// maxSocketPath is what fits a unix socket address (sun_path, 108 bytes
// with its terminating NUL).
const maxSocketPath = 107

// Config is what the plugin takes from its network configuration.
type Config struct {
	// Network is the network's name: the agent scopes GC by it.
	Network    string
	CNIVersion string
	// Pool is the IP pool of the network (ipam.pool).
	Pool string
	// Socket is the agent's unix socket (ipam.socket).
	Socket string
	// Timeout bounds each call to the agent (ipam.timeout).
	Timeout time.Duration
	// Master is the main plugin's parent link (macvlan's and ipvlan's
	// "master"), when it names one: a pod's netdev must agree with it.
	Master string
	// CNIArgs are the network's `args.cni` values this plugin reads.
	CNIArgs CNIArgs
	// RuntimeIPs is the `ips` capability (runtimeConfig.ips).
	RuntimeIPs []string
	// ValidAttachments is GC's `cni.dev/valid-attachments`; nil when the
	// configuration does not carry the key.
	ValidAttachments []ipamwire.Attachment
	// PrevResult is the result CHECK checks, nil when there is none.
	PrevResult *types100.Result
}

// CNIArgs are the keys of `args.cni` this plugin reads. Any other key is
// refused (the README's promise: a typo such as "subnett" must not hand
// out an address the pod did not ask for), except `labels`, which CNI's
// CONVENTIONS.md reserves in args.cni for every plugin of a chain.
type CNIArgs struct {
	Pool, Subnet, IP, NetDev, Interface string
	// IPs is the `ips` convention of args.cni (CNI's CONVENTIONS.md).
	IPs []string
}

// ipamSection is the `ipam` object; unknown keys are refused so that a
// typo is not silently ignored.
type ipamSection struct {
	Type    string `json:"type"`
	Pool    string `json:"pool"`
	Socket  string `json:"socket"`
	Timeout string `json:"timeout"`
}

// netConf is the part of the whole network configuration the plugin
// reads. The embedded PluginConf's own IPAM field is shadowed.
type netConf struct {
	types.PluginConf
	IPAM   json.RawMessage `json:"ipam"`
	Master string          `json:"master"`
	Args   *struct {
		CNI map[string]json.RawMessage `json:"cni"`
	} `json:"args"`
	RuntimeConfig *struct {
		IPs []string `json:"ips"`
	} `json:"runtimeConfig"`
}

// ParseConfig reads the network configuration from the plugin's stdin.
// Every error is a *types.Error with code 7 (invalid configuration) or 6
// (decoding failure), naming the key at fault.
func ParseConfig(data []byte) (*Config, error) {
	var nc netConf
	if err := json.Unmarshal(data, &nc); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decode network configuration", err.Error())
	}
	if nc.Name == "" {
		return nil, invalidConfig("the network configuration has no name")
	}
	c := &Config{Network: nc.Name, CNIVersion: nc.CNIVersion, Master: nc.Master}
	if err := c.parseIPAM(nc.IPAM); err != nil {
		return nil, err
	}
	if nc.Args != nil {
		args, err := parseCNIArgs(nc.Args.CNI)
		if err != nil {
			return nil, err
		}
		c.CNIArgs = args
	}
	if nc.RuntimeConfig != nil {
		c.RuntimeIPs = nc.RuntimeConfig.IPs
	}
	if nc.ValidAttachments != nil {
		c.ValidAttachments = make([]ipamwire.Attachment, 0, len(nc.ValidAttachments))
		for _, a := range nc.ValidAttachments {
			c.ValidAttachments = append(c.ValidAttachments, ipamwire.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	if err := c.parsePrevResult(&nc.PluginConf); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) parseIPAM(raw json.RawMessage) error {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return invalidConfig("the network configuration has no ipam section")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s ipamSection
	if err := dec.Decode(&s); err != nil {
		return invalidConfig(fmt.Sprintf("ipam section: want type, pool, socket, timeout: %v", err))
	}
	if s.Pool == "" {
		return invalidConfig("ipam.pool is required: the IP pool of the network, as the controller's --ip-pools name it")
	}
	c.Pool = s.Pool
	c.Socket = s.Socket
	if c.Socket == "" {
		c.Socket = ipamwire.DefaultSocket
	}
	if !filepath.IsAbs(c.Socket) || len(c.Socket) > maxSocketPath {
		return invalidConfig(fmt.Sprintf("ipam.socket %q is not an absolute path of at most %d bytes", c.Socket, maxSocketPath))
	}
	c.Timeout = ipamwire.DefaultCallTimeout
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 || d > MaxTimeout {
			return invalidConfig(fmt.Sprintf("ipam.timeout %q is not a duration above 0 and at most %s", s.Timeout, MaxTimeout))
		}
		c.Timeout = d
	}
	return nil
}

// cniArgsKnown are the keys of args.cni parseCNIArgs accepts: its own and
// the conventions' labels, which it does not read.
var cniArgsKnown = []string{"interface", "ip", "ips", "labels", "netdev", "pool", "subnet"}

// parseCNIArgs reads the keys of args.cni this plugin knows; each must be
// a string (ips: a list of strings). An unknown key is refused, naming it.
func parseCNIArgs(m map[string]json.RawMessage) (CNIArgs, error) {
	var a CNIArgs
	var unknown []string
	for key := range m {
		if !slices.Contains(cniArgsKnown, key) {
			unknown = append(unknown, strconv.Quote(clip([]byte(key))))
		}
	}
	if len(unknown) > 0 {
		// Sorted, so that the message is the same on every run.
		slices.Sort(unknown)
		return CNIArgs{}, invalidConfig(fmt.Sprintf("args.cni: unknown field %s (want %s)", strings.Join(unknown, ", "), strings.Join(cniArgsKnown, ", ")))
	}
	for key, dst := range map[string]*string{"pool": &a.Pool, "subnet": &a.Subnet, "ip": &a.IP, "netdev": &a.NetDev, "interface": &a.Interface} {
		raw, ok := m[key]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return CNIArgs{}, invalidConfig(fmt.Sprintf("args.cni.%s is %s, not a string", key, clip(raw)))
		}
	}
	if raw, ok := m["ips"]; ok {
		if err := json.Unmarshal(raw, &a.IPs); err != nil {
			return CNIArgs{}, invalidConfig(fmt.Sprintf("args.cni.ips is %s, not a list of strings", clip(raw)))
		}
	}
	return a, nil
}

// parsePrevResult reads prevResult as a current result, whatever version
// it was written in.
func (c *Config) parsePrevResult(pc *types.PluginConf) error {
	if pc.RawPrevResult == nil {
		return nil
	}
	if err := version.ParsePrevResult(pc); err != nil {
		return types.NewError(types.ErrDecodingFailure, "decode prevResult", err.Error())
	}
	r, err := types100.NewResultFromResult(pc.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "convert prevResult", err.Error())
	}
	c.PrevResult = r
	return nil
}

func invalidConfig(msg string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, msg, "")
}

// clip quotes at most 64 bytes of a value for an error message.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/netns"
)

// Link is one interface of a network namespace as iproute2 shows it
// (`ip -j -d addr show`), with its IPv4 addresses.
type Link struct {
	Name  string
	Kind  string // linkinfo's kind: "macvlan", "veth", ...; "" for none
	Mode  string // a macvlan's or ipvlan's mode: "bridge", "l2"
	Up    bool   // administratively up
	Addrs []netip.Prefix
}

// ipLink is the part of `ip -j -d addr show` that Links reads.
type ipLink struct {
	Name     string   `json:"ifname"`
	Flags    []string `json:"flags"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
		Data struct {
			Mode string `json:"mode"`
		} `json:"info_data"`
	} `json:"linkinfo"`
	Addrs []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

// Links lists the interfaces of the network namespace at path (a
// /proc/<pid>/ns/net link, or a /proc/<pid>/fd/<n> that holds one),
// entered with util-linux's nsenter.
func Links(ctx context.Context, path string) ([]Link, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+path, "ip", "-j", "-d", "addr", "show").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("ip addr in %s: %w", path, err)
	}
	var raw []ipLink
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("ip addr in %s: %w", path, err)
	}
	links := make([]Link, 0, len(raw))
	for _, r := range raw {
		l := Link{Name: r.Name, Kind: r.LinkInfo.Kind, Mode: r.LinkInfo.Data.Mode}
		for _, f := range r.Flags {
			l.Up = l.Up || f == "UP"
		}
		for _, a := range r.Addrs {
			if a.Family != "inet" {
				continue
			}
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("ip addr in %s: interface %s: %w", path, r.Name, err)
			}
			l.Addrs = append(l.Addrs, netip.PrefixFrom(addr, a.PrefixLen))
		}
		links = append(links, l)
	}
	return links, nil
}

// NetnsLink is one interface with an address of a given prefix, in one
// of the node's network namespaces.
type NetnsLink struct {
	Netns uint32 // the namespace's inode
	Path  string // where it was entered
	Link
}

// AddressesIn finds every interface with an IPv4 address inside within in
// every network namespace of the node that a process is in or holds open
// (/proc/<pid>/ns/net, /proc/<pid>/fd/<n>): the pods', the node's own, and
// those the agent still holds for pods whose sandbox is gone. Namespaces
// whose last holder exits during the scan are skipped.
func AddressesIn(ctx context.Context, within netip.Prefix) ([]NetnsLink, error) {
	paths, err := netnsPaths()
	if err != nil {
		return nil, err
	}
	inodes := make([]uint32, 0, len(paths))
	for ino := range paths {
		inodes = append(inodes, ino)
	}
	sort.Slice(inodes, func(i, j int) bool { return inodes[i] < inodes[j] })
	var out []NetnsLink
	for _, ino := range inodes {
		p := paths[ino]
		links, err := Links(ctx, p)
		if err != nil {
			if still, _ := os.Readlink(p); still != fmt.Sprintf("net:[%d]", ino) {
				continue // its holder is gone
			}
			return nil, err
		}
		for _, l := range links {
			for _, a := range l.Addrs {
				if within.Contains(a.Addr()) {
					out = append(out, NetnsLink{Netns: ino, Path: p, Link: l})
					break
				}
			}
		}
	}
	return out, nil
}

// netnsPaths maps each network namespace's inode to one path that enters
// it.
func netnsPaths() (map[uint32]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	paths := map[uint32]string{}
	add := func(p string) {
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, "net:[") {
			return
		}
		ino, err := netns.ParseNetnsLink(target)
		if err != nil {
			return
		}
		if _, ok := paths[ino]; !ok {
			paths[ino] = p
		}
	}
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", ent.Name())
		add(filepath.Join(dir, "ns", "net"))
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			add(filepath.Join(dir, "fd", fd.Name()))
		}
	}
	return paths, nil
}

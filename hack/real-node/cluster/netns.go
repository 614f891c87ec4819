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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

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
	// MAC is its hardware address; ParentIndex the ifindex of a macvlan's
	// or ipvlan's parent, in the namespace the parent is in (0: none).
	MAC         string
	ParentIndex int
}

// ipLink is the part of `ip -j -d addr show` that Links reads.
type ipLink struct {
	Name      string   `json:"ifname"`
	Flags     []string `json:"flags"`
	Address   string   `json:"address"`
	LinkIndex int      `json:"link_index"`
	LinkInfo  struct {
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
		l := Link{Name: r.Name, Kind: r.LinkInfo.Kind, Mode: r.LinkInfo.Data.Mode, MAC: r.Address, ParentIndex: r.LinkIndex}
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

// HoldFreeInodes takes every namespace inode the kernel has free up to
// top and holds it until release: it makes UTS namespaces, each held by a
// descriptor, until the kernel hands out one above top. The kernel gives
// a new namespace of any type the lowest free inode (proc_alloc_inum), so
// until release the next namespaces made, a pod's new network namespace
// among them, get the inodes freed after this call, lowest first: those
// of namespaces that end meanwhile, such as a dead sandbox's. That is
// when a service that names a freed namespace's inode would admit another
// pod's. It makes at most limit namespaces, and returns how many it
// holds. release may be called more than once.
func HoldFreeInodes(top uint32, limit int) (held int, release func(), err error) {
	type result struct {
		files []*os.File
		last  uint32
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// The thread's UTS namespace changes: the goroutine ends with its
		// thread locked, so that the runtime ends the thread with it.
		runtime.LockOSThread()
		var r result
		defer func() { done <- r }()
		for len(r.files) < limit && r.last <= top {
			if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
				r.err = fmt.Errorf("unshare a UTS namespace: %w", err)
				return
			}
			f, err := os.Open("/proc/thread-self/ns/uts")
			if err != nil {
				r.err = err
				return
			}
			r.files = append(r.files, f)
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil {
				r.err = fmt.Errorf("stat a UTS namespace: %w", err)
				return
			}
			r.last = uint32(st.Ino)
		}
	}()
	r := <-done
	release = sync.OnceFunc(func() {
		for _, f := range r.files {
			f.Close()
		}
	})
	switch {
	case r.err != nil:
		release()
		return 0, nil, r.err
	case r.last <= top:
		release()
		return 0, nil, fmt.Errorf("hold the free namespace inodes up to %d: %d namespaces made, the last %d", top, len(r.files), r.last)
	}
	return len(r.files), release, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// setupHostLocal configures Debian's host-local over the whole pool, its
// store under dir.
func setupHostLocal(bin, dir string) (*plugin, func(), error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, nil, fmt.Errorf("%v (apt-get install containernetworking-plugins)", err)
	}
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, nil, err
	}
	p := &plugin{
		name:    "host-local",
		about:   debVersion("containernetworking-plugins") + ", " + bin + ", store " + store,
		bin:     bin,
		cniPath: filepath.Dir(bin),
		netns:   filepath.Join(dir, "no-netns"),
		conf: fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"hsn","type":"macvlan","master":"hsn0",`+
			`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}}`, store, hsn0.Prefix),
		inRange: within(hsn0.Prefix),
		verify: func(context.Context) error {
			// What is left in the network's directory: the last reserved
			// address (last_reserved_ip.0) and the lock, never a lease.
			ents, err := os.ReadDir(filepath.Join(store, "hsn"))
			if err != nil {
				return err
			}
			for _, e := range ents {
				if n := e.Name(); n != "lock" && !strings.HasPrefix(n, "last_reserved_ip") {
					return fmt.Errorf("lease %s still in the store", n)
				}
			}
			return nil
		},
	}
	return p, nil, nil
}

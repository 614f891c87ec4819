package mocksysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SetLink changes the link state of the NIC named nic ("cxi2") in a tree
// that [Write] wrote under dir: device/properties/link, and the netdev's
// operstate, carrier and speed. Each file is replaced atomically (written
// beside it, then renamed), so a concurrent reader sees the old or the new
// value, never a torn one. It returns an error when the NIC or a file is
// missing.
func SetLink(dir, nic string, up bool) error {
	pciDir, err := nicPCIDir(dir, nic)
	if err != nil {
		return err
	}
	if err := atomicWrite(filepath.Join(pciDir, "properties", "link"), boolDigit(up)+"\n"); err != nil {
		return err
	}
	nd, err := netdevOf(dir, pciDir)
	if err != nil || nd == "" {
		return err
	}
	oper, carrier, speed := "down", "0", "-1"
	if up {
		oper, carrier, speed = "up", "1", strconv.Itoa(linkSpeedMbps)
	}
	for name, v := range map[string]string{"carrier": carrier, "speed": speed, "operstate": oper} {
		if err := atomicWrite(filepath.Join(nd, name), v+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// SetOperState changes what the kernel shows of the netdev named netdev
// ("hsn0") in the tree under dir when the netdev is set down or up (ip
// link set): its operstate and carrier. The NIC's own link
// (properties/link) is left as it is. The writes are atomic as in
// [SetLink].
func SetOperState(dir, netdev string, up bool) error {
	nd, err := filepath.EvalSymlinks(filepath.Join(dir, "sys", "class", "net", netdev))
	if err != nil {
		return fmt.Errorf("set operstate of %s: %w", netdev, err)
	}
	oper, carrier := "down", "0"
	if up {
		oper, carrier = "up", "1"
	}
	for name, v := range map[string]string{"carrier": carrier, "operstate": oper} {
		if err := atomicWrite(filepath.Join(nd, name), v+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// SetRetryHandler sets device/properties/pct_eq of the NIC named nic in the
// tree under dir: a nonzero event queue number while the retry handler
// runs, 0 when it does not. The write is atomic as in [SetLink].
func SetRetryHandler(dir, nic string, running bool) error {
	pciDir, err := nicPCIDir(dir, nic)
	if err != nil {
		return err
	}
	v := "0"
	if running {
		idx, err := strconv.Atoi(strings.TrimPrefix(nic, "cxi"))
		if err != nil {
			return fmt.Errorf("set retry handler: bad NIC name %q", nic)
		}
		v = strconv.Itoa(2 + idx)
	}
	return atomicWrite(filepath.Join(pciDir, "properties", "pct_eq"), v+"\n")
}

// nicPCIDir resolves sys/class/cxi/<nic>/device to a real directory.
func nicPCIDir(dir, nic string) (string, error) {
	if nic == "" || strings.ContainsAny(nic, `/\`) || nic == "." || nic == ".." {
		return "", fmt.Errorf("bad NIC name %q", nic)
	}
	p, err := filepath.EvalSymlinks(filepath.Join(dir, "sys", "class", "cxi", nic, "device"))
	if err != nil {
		return "", fmt.Errorf("find %s: %w", nic, err)
	}
	return p, nil
}

// netdevOf returns the netdev directory whose device link resolves to
// pciDir, or "" when there is none (a VF).
func netdevOf(dir, pciDir string) (string, error) {
	classNet := filepath.Join(dir, "sys", "class", "net")
	entries, err := os.ReadDir(classNet)
	if err != nil {
		return "", fmt.Errorf("list netdevs: %w", err)
	}
	for _, e := range entries {
		dev, err := filepath.EvalSymlinks(filepath.Join(classNet, e.Name(), "device"))
		if err != nil {
			continue // lo and other devices without a parent
		}
		if dev == pciDir {
			return filepath.EvalSymlinks(filepath.Join(classNet, e.Name()))
		}
	}
	return "", nil
}

// atomicWrite replaces file p with content by writing a temporary file in
// the same directory and renaming it over p.
func atomicWrite(p, content string) error {
	if _, err := os.Lstat(p); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tmp := f.Name()
	_, werr := f.WriteString(content)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, p)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, werr)
	}
	return nil
}

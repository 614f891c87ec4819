package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// maxSocketPath is the longest path a unix socket address can hold on
// Linux (108 bytes including the terminating NUL).
const maxSocketPath = 107

// fileID identifies one incarnation of a file: a socket created again at
// the same path gets a new inode or at least a new modification time.
type fileID struct {
	dev, ino uint64
	mtime    int64
}

// statID returns the identity of the file at path.
func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino // Dev is not uint64 on every platform
	}
	return id, nil
}

// ErrSocketInUse is returned (wrapped) by [Server.Run] when another live
// server, such as a second agent, already listens on the socket path.
// Replacing its socket would make the two replace each other forever.
var ErrSocketInUse = errors.New("socket in use by another server")

// staleProbeTimeout bounds the connect that tells a live socket from a
// stale one.
const staleProbeTimeout = 100 * time.Millisecond

// removeStaleSocket removes a socket left at path by an earlier run. It
// refuses to remove anything that is not a socket, and a socket that still
// accepts connections (ErrSocketInUse).
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("remove stale socket %s: not a socket (%s)", path, fi.Mode().Type())
	}
	if conn, err := net.DialTimeout("unix", path, staleProbeTimeout); err == nil {
		conn.Close()
		return fmt.Errorf("%w: %s", ErrSocketInUse, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeIfSame removes path only if it is still the file identified by id,
// so that a server never deletes a socket another server created since.
func removeIfSame(path string, id fileID) error {
	cur, err := statID(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur != id {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

var (
	// qualifiedNamePart is the name part of a Kubernetes qualified name.
	qualifiedNamePart = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	// dnsSubdomain is an RFC 1123 subdomain, the prefix of a qualified name.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validateResourceName returns an error unless name is an extended
// resource name the kubelet accepts: "<domain>/<name>" outside the
// kubernetes.io domains.
func validateResourceName(name string) error {
	domain, base, ok := strings.Cut(name, "/")
	switch {
	case !ok || strings.Contains(base, "/"):
		return fmt.Errorf("resource name %q: want <domain>/<name>", name)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return fmt.Errorf("resource name %q: the kubernetes.io domain is reserved", name)
	case len(domain) > 253 || !dnsSubdomain.MatchString(domain):
		return fmt.Errorf("resource name %q: domain is not a DNS subdomain", name)
	case len(base) > 63 || !qualifiedNamePart.MatchString(base):
		return fmt.Errorf("resource name %q: name part is not a qualified name", name)
	}
	return nil
}

// defaultSocketName derives a socket file name from a resource name:
// "hpe.com/cxi" gives "slingshot-hpe.com-cxi.sock".
func defaultSocketName(resource string) string {
	var b strings.Builder
	b.WriteString("slingshot-")
	for _, r := range resource {
		switch {
		case r == '/':
			b.WriteByte('-')
		case r == '.' || r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	b.WriteString(".sock")
	return b.String()
}

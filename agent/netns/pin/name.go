package pin

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadHolder: a holder name that cannot be pinned (empty), or a file
// name that is no holder's.
var ErrBadHolder = errors.New("bad pin holder name")

const (
	// maxPart bounds each path component a holder's name is cut into,
	// under NAME_MAX (255) with room for tmpSuffix.
	maxPart = 250
	// dirMark ends a component that is a directory of a long name's
	// parts: never in an escaped name, so no holder's file is one.
	dirMark = "+"
	// tmpSuffix names the file a replacing pin is mounted on first. No
	// escaped name has a '.', so no holder's file ends in it.
	tmpSuffix = ".tmp"
)

// FileName returns the path, relative to a [Pins] directory, of holder's
// pin. Bytes other than ASCII letters, digits, '-' and '_' are escaped as
// %XX (upper-case hex), so "default/web-0" is "default%2Fweb-0" and
// "claim:1f2e..." is "claim%3A1f2e...": a name has no '/', never is "."
// or "..", never starts with '.', and maps back to one holder alone
// ([HolderOf]). A name longer than a file name may be (a pod key can
// reach 317 bytes) is cut into components of 250 bytes, each but the last
// a directory ending in '+'. It returns an error wrapping [ErrBadHolder]
// for an empty holder.
func FileName(holder string) (string, error) {
	if holder == "" {
		return "", fmt.Errorf("%w: empty", ErrBadHolder)
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(holder); i++ {
		c := holder[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	esc := b.String()
	var parts []string
	for len(esc) > maxPart {
		parts = append(parts, esc[:maxPart]+dirMark)
		esc = esc[maxPart:]
	}
	return strings.Join(append(parts, esc), "/"), nil
}

// HolderOf returns the holder whose pin is at the relative path name, the
// inverse of [FileName]. It returns an error wrapping [ErrBadHolder] for
// a name FileName never returns, so that no two names map to one holder.
func HolderOf(name string) (string, error) {
	parts := strings.Split(name, "/")
	var esc strings.Builder
	for i, p := range parts {
		last := i == len(parts)-1
		body, isDir := strings.CutSuffix(p, dirMark)
		if isDir == last || (!last && len(body) != maxPart) || (last && (p == "" || len(p) > maxPart)) {
			return "", fmt.Errorf("%w: %q is not a pin file name", ErrBadHolder, name)
		}
		esc.WriteString(body)
	}
	s := esc.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		if c != '%' || i+2 >= len(s) {
			return "", fmt.Errorf("%w: %q: stray %q", ErrBadHolder, name, c)
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		v := hi<<4 | lo
		if hi < 0 || lo < 0 || plain(byte(v)) {
			// Escaping what needs none would give a second name.
			return "", fmt.Errorf("%w: %q: bad escape %q", ErrBadHolder, name, s[i:i+3])
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// plain reports whether c stands for itself in a pin's file name.
func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// unhex is the value of an upper-case hex digit, -1 for any other byte.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

package sniff

import (
	"bytes"
	"fmt"
	"net/netip"
)

// authority is a parsed host[:port], as offsets into the parsed bytes.
type authority struct {
	hostStart, hostEnd int        // the host, without brackets or a trailing dot
	portStart, portEnd int        // the port digits; equal if no port
	port               int        // -1 if no port
	addr               netip.Addr // valid if the host is an IP literal
	upper              bool       // the host has letters A-Z
}

// parseAuthority parses b, which starts at offset base of the request
// head, as host[:port] (RFC 3986 3.2.2, 3.2.3): host is an IPv6 literal in
// brackets (no zone), a dotted-quad IPv4 address, or a DNS name that
// checkHostName accepts, with one trailing dot allowed and dropped. The port
// must be 1 to 65535 when present, and present if requirePort.
func parseAuthority(b []byte, base int, requirePort bool) (authority, error) {
	a := authority{port: -1}
	if len(b) == 0 {
		return a, fmt.Errorf("empty host")
	}
	var host, rest []byte
	if b[0] == '[' {
		end := bytes.IndexByte(b, ']')
		if end < 0 {
			return a, fmt.Errorf("%q has no closing bracket", string(b))
		}
		host, rest = b[1:end], b[end+1:]
		addr, err := netip.ParseAddr(string(host))
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return a, fmt.Errorf("%q is not an IPv6 address", string(host))
		}
		a.addr = addr
		a.hostStart = base + 1
	} else {
		host, rest = b, nil
		if i := bytes.IndexByte(b, ':'); i >= 0 {
			host, rest = b[:i], b[i:]
		}
		a.hostStart = base
		if len(host) > 1 && host[len(host)-1] == '.' {
			host = host[:len(host)-1]
		}
		hc, err := checkHostName(host)
		if err != nil {
			return a, err
		}
		a.upper = hc.upper
		if hc.numericEnd {
			addr, err := netip.ParseAddr(string(host))
			if err != nil || !addr.Is4() {
				return a, fmt.Errorf("host %q ends in a number but is not an IPv4 address", string(host))
			}
			a.addr = addr
		}
	}
	a.hostEnd = a.hostStart + len(host)
	a.portStart = base + len(b) - len(rest)
	a.portEnd = a.portStart
	switch {
	case len(rest) == 0:
		if requirePort {
			return a, fmt.Errorf("%q has no port", string(b))
		}
		return a, nil
	case rest[0] != ':':
		return a, fmt.Errorf("%q has %q after the host", string(b), string(rest))
	}
	digits := rest[1:]
	port := 0
	for _, c := range digits {
		if c < '0' || c > '9' || port > 65535 {
			port = -1
			break
		}
		port = port*10 + int(c-'0')
	}
	if len(digits) == 0 || port < 1 || port > 65535 {
		return a, fmt.Errorf("port %q is not a number from 1 to 65535", string(digits))
	}
	a.port = port
	a.portStart++
	a.portEnd = a.portStart + len(digits)
	return a, nil
}

// sameHost reports whether a and o (parsed from the same head) name the
// same host: the same IP address, or DNS names equal but for case.
func (a authority) sameHost(o authority, head []byte) bool {
	if a.addr.IsValid() || o.addr.IsValid() {
		return a.addr == o.addr
	}
	return bytes.EqualFold(head[a.hostStart:a.hostEnd], head[o.hostStart:o.hostEnd])
}

// hostString returns the host of a as found in s (the head as a string),
// lowercased; an IPv6 address in its canonical form, without brackets.
func (a authority) hostString(s string) string {
	if a.addr.Is6() {
		return a.addr.String()
	}
	h := s[a.hostStart:a.hostEnd]
	if a.upper {
		return toLowerASCII(h)
	}
	return h
}

// toLowerASCII lowercases the ASCII letters of s.
func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

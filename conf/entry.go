package conf

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// Kind says what an entry names.
type Kind int

const (
	// KindName is one exact DNS name ("example.com").
	KindName Kind = iota
	// KindWildcard is every name below a suffix, at any depth, but not the
	// suffix itself ("*.example.com").
	KindWildcard
	// KindPrefix is an IP address or CIDR prefix ("203.0.113.7",
	// "10.0.0.0/8"), matched against a connection's original destination.
	KindPrefix
)

// String returns "name", "wildcard" or "prefix".
func (k Kind) String() string {
	switch k {
	case KindName:
		return "name"
	case KindWildcard:
		return "wildcard"
	case KindPrefix:
		return "prefix"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Entry is one parsed allowlist entry.
type Entry struct {
	Raw  string // the entry as written (trimmed)
	Kind Kind
	// Name is, for KindName, the normalized name (see NormalizeName); for
	// KindWildcard, the normalized suffix without the "*."
	// ("example.com" for "*.example.com"); empty for KindPrefix.
	Name string
	// Prefix is, for KindPrefix, the masked prefix; a single address is a
	// /32 or /128, and IPv4-mapped IPv6 is turned into IPv4.
	Prefix netip.Prefix
	Ports  PortRange // the zero value admits every port
}

// ParseEntry parses one allowlist entry (see the package documentation for
// the grammar). Errors are *EntryError values that name the entry and say
// why it is not one.
func ParseEntry(s string) (Entry, error) {
	raw := strings.TrimSpace(s)
	e, err := parseEntry(raw)
	if err != nil {
		return Entry{}, &EntryError{Entry: raw, Reason: err.Error()}
	}
	e.Raw = raw
	return e, nil
}

// parseEntry parses a trimmed entry; errors say why without naming it.
func parseEntry(s string) (Entry, error) {
	switch {
	case s == "":
		return Entry{}, errors.New("empty entry")
	case strings.IndexFunc(s, unicode.IsSpace) >= 0:
		return Entry{}, errors.New("whitespace inside the entry (give one entry per item or line)")
	case strings.Contains(s, "://"):
		return Entry{}, urlError(s)
	case s == "*" || strings.HasPrefix(s, "*:"):
		return Entry{}, errors.New("a bare * is not allowed (use mode: open)")
	}
	hp, err := splitHostPort(s)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if hp.hasPort {
		if e.Ports, err = parsePortRange(hp.port); err != nil {
			return Entry{}, err
		}
	}
	host := hp.host
	if addr, zone, ok := strings.Cut(host, "%"); ok {
		if _, err := netip.ParseAddr(addr); err == nil {
			zone, _, _ = strings.Cut(zone, "/")
			return Entry{}, fmt.Errorf("an IP address with a zone (%%%s) is not allowed", zone)
		}
	}
	switch {
	case hp.bracketed:
		if !strings.Contains(host, ":") {
			if _, err := netip.ParseAddr(strings.Split(host, "/")[0]); err == nil {
				return Entry{}, fmt.Errorf("brackets are only for IPv6 addresses (write %s)", host+portSuffix(hp))
			}
			return Entry{}, errors.New("brackets are only for IPv6 addresses")
		}
		e.Kind = KindPrefix
		e.Prefix, err = parseIP(host)
	case strings.Contains(host, ":"):
		// Two or more colons: a bare IPv6 address or prefix, or a mistake.
		if first, _, _ := strings.Cut(host, ":"); strings.Trim(first, "0123456789abcdefABCDEF") != "" {
			return Entry{}, errors.New("more than one ':' (a name takes at most one :port; an IPv6 address with a port goes in brackets, as in [2001:db8::1]:443)")
		}
		e.Kind = KindPrefix
		if e.Prefix, err = parseIP(host); err != nil && !strings.Contains(host, "%") {
			err = fmt.Errorf("%v (an IPv6 address with a port goes in brackets, as in [2001:db8::1]:443)", err)
		}
	case strings.Contains(host, "/"):
		if _, aerr := netip.ParseAddr(strings.Split(host, "/")[0]); aerr != nil {
			return Entry{}, urlError(s)
		}
		e.Kind = KindPrefix
		e.Prefix, err = parseIP(host)
	case strings.HasPrefix(host, "*."):
		e.Kind = KindWildcard
		e.Name, err = parseWildcardSuffix(host[len("*."):])
	case numericTLD(host):
		e.Kind = KindPrefix
		e.Prefix, err = parseIP(host)
	default:
		e.Kind = KindName
		e.Name, err = parseName(host)
	}
	if err != nil {
		return Entry{}, err
	}
	return e, nil
}

// hostPort is an entry split at its port.
type hostPort struct {
	host      string
	port      string // the text after ':', when hasPort
	hasPort   bool
	bracketed bool // host was written in [brackets]
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port"; a host
// with two or more colons and no brackets is a bare IPv6 address or prefix
// and has no port.
func splitHostPort(s string) (hostPort, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hostPort{}, errors.New("missing ']' after '['")
		}
		hp := hostPort{host: s[1:end], bracketed: true}
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			hp.port, hp.hasPort = rest[1:], true
		default:
			return hostPort{}, fmt.Errorf("unexpected %q after ']' (want :port or nothing)", rest)
		}
		if hp.host == "" {
			return hostPort{}, errors.New("empty brackets")
		}
		return hp, nil
	}
	if strings.Count(s, ":") == 1 {
		host, port, _ := strings.Cut(s, ":")
		if host == "" {
			return hostPort{}, errors.New("missing host before ':'")
		}
		return hostPort{host: host, port: port, hasPort: true}, nil
	}
	return hostPort{host: s}, nil
}

// portSuffix renders hp's port as written, with its ':', or "".
func portSuffix(hp hostPort) string {
	if !hp.hasPort {
		return ""
	}
	return ":" + hp.port
}

// parseIP parses an IP address or CIDR prefix. IPv4-mapped IPv6 becomes
// IPv4 (with 96 taken off the prefix length). A prefix with host bits set
// ("10.1.2.3/8") is rejected rather than masked: the writer may have meant
// a narrower prefix or a single host, and widening an allowlist on a guess
// is the wrong way to fail.
func parseIP(s string) (netip.Prefix, error) {
	addrText, bitsText, isPrefix := strings.Cut(s, "/")
	if i := strings.IndexByte(addrText, '%'); i >= 0 {
		return netip.Prefix{}, fmt.Errorf("an IP address with a zone (%s) is not allowed", addrText[i:])
	}
	a, err := netip.ParseAddr(addrText)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a valid IP address: %s", netipReason(err))
	}
	bits := a.BitLen()
	if isPrefix {
		if bitsText == "" || strings.TrimLeft(bitsText, "0123456789") != "" {
			return netip.Prefix{}, fmt.Errorf("bad prefix length %q", bitsText)
		}
		n, err := strconv.Atoi(bitsText)
		if err != nil || n > bits {
			return netip.Prefix{}, fmt.Errorf("prefix length %s out of range (0-%d)", bitsText, bits)
		}
		bits = n
	}
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	p := netip.PrefixFrom(a, bits)
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("host bits set in prefix (did you mean %s, or the address %s?)", m, a)
	}
	return p, nil
}

// netipReason drops the `ParseAddr("..."): ` head of a net/netip error,
// since the entry is already named.
func netipReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, `"): `); i >= 0 {
		return msg[i+len(`"): `):]
	}
	return msg
}

// numericTLD reports whether the last label of host is a number (decimal,
// or 0x hex), which makes host an IPv4 address or nothing: no top-level
// domain is numeric, and resolvers that follow inet_aton read such names as
// addresses ("0x7f.1" is 127.0.0.1 to them).
func numericTLD(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		return strings.Trim(last[2:], "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// parseName normalizes an entry's name.
func parseName(host string) (string, error) {
	n, err := normalizeName(host)
	if err != nil {
		return "", err
	}
	if numericTLD(n) {
		// Only reachable through IDNA mapping, e.g. full-width digits.
		return "", fmt.Errorf("the name %s ends in a numeric label, as only IPv4 addresses do (write addresses in ASCII)", n)
	}
	return n, nil
}

// parseWildcardSuffix normalizes what follows "*." in a wildcard entry.
func parseWildcardSuffix(suffix string) (string, error) {
	switch {
	case suffix == "":
		return "", errors.New("empty label")
	case strings.Contains(suffix, "*"):
		return "", errors.New("wildcard only allowed as the whole first label, as in *.example.com")
	case numericTLD(suffix):
		return "", errors.New("a wildcard cannot cover an IP address (use a CIDR prefix such as 10.0.0.0/8)")
	}
	return parseName(suffix)
}

// urlError says to give the host, suggesting it when s parses as a URL.
func urlError(s string) error {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return fmt.Errorf("give the host, not a URL (e.g. %s)", u.Host)
	}
	return errors.New("give the host, not a URL")
}

// String returns the canonical form of e, which ParseEntry reads back as an
// equal entry: "example.com", "*.example.com:443", "203.0.113.7:8000-8999",
// "10.0.0.0/8", "2001:db8::/32", "[2001:db8::1]:443".
func (e Entry) String() string {
	var host string
	switch e.Kind {
	case KindName:
		host = e.Name
	case KindWildcard:
		host = "*." + e.Name
	case KindPrefix:
		if e.Prefix.IsSingleIP() {
			host = e.Prefix.Addr().String()
		} else {
			host = e.Prefix.String()
		}
		if e.Prefix.Addr().Is6() && !e.Ports.Any() {
			host = "[" + host + "]"
		}
	default:
		return e.Raw
	}
	if e.Ports.Any() {
		return host
	}
	return host + ":" + e.Ports.String()
}

// Equal reports whether e and f admit the same connections in the same
// way: same kind, name or prefix, and ports. Raw is not compared.
func (e Entry) Equal(f Entry) bool {
	return e.Kind == f.Kind && e.Name == f.Name && e.Prefix == f.Prefix && e.Ports == f.Ports
}

// MatchName reports whether e admits a connection to the given name and
// port. name must already be normalized (see NormalizeName). Only
// KindName and KindWildcard entries match names.
func (e Entry) MatchName(name string, port uint16) bool {
	switch e.Kind {
	case KindName:
		if name != e.Name {
			return false
		}
	case KindWildcard:
		// Strictly below the suffix: at least one non-empty label and a dot.
		n := len(name) - len(e.Name)
		if n < 2 || name[n-1] != '.' || name[n:] != e.Name {
			return false
		}
	default:
		return false
	}
	return e.Ports.Contains(port)
}

// MatchAddr reports whether e admits a connection to the given original
// destination address and port. a is unmapped (and its zone dropped)
// first. Only KindPrefix entries match addresses.
func (e Entry) MatchAddr(a netip.Addr, port uint16) bool {
	if e.Kind != KindPrefix {
		return false
	}
	a = a.Unmap().WithZone("")
	return e.Prefix.Contains(a) && e.Ports.Contains(port)
}

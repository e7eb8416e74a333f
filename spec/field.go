package spec

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// FieldError is a setting a front door was given that is not valid. Its
// text names the key as that front door spells it (allowDirect in a
// conflist, annotation doorman.io/allow-direct, --allow-direct as a flag),
// the value as given, and why: `allowDirect "db.example": only an IP
// address or CIDR (with an optional port) can bypass the proxy`.
type FieldError struct {
	Key    string
	Value  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %q: %s", e.Key, e.Value, e.Reason) }

// ParseAllowDirect parses the allowDirect entries given under key (see
// conf.ParseDirect). The error is a *FieldError.
func ParseAllowDirect(key string, values []string) ([]conf.Direct, error) {
	var out []conf.Direct
	for _, v := range values {
		d, err := conf.ParseDirect(v)
		if err != nil {
			var ee *conf.EntryError
			if errors.As(err, &ee) {
				return nil, &FieldError{Key: key, Value: ee.Entry, Reason: ee.Reason}
			}
			return nil, &FieldError{Key: key, Value: v, Reason: err.Error()}
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseServers parses DNS servers given under key, in every form
// resolver.ParseServer takes ("203.0.113.53", "[2001:db8::53]:5353"). The
// error is a *FieldError.
func ParseServers(key string, values ...string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, v := range values {
		ap, err := resolver.ParseServer(v)
		if err != nil {
			// ParseServer names the value first; the key goes before it.
			value := strings.TrimSpace(v)
			reason := strings.TrimPrefix(err.Error(), strconv.Quote(value)+": ")
			return nil, &FieldError{Key: key, Value: value, Reason: reason}
		}
		out = append(out, ap)
	}
	return out, nil
}

// ParseUpstreamResolver parses the upstreamResolver given under key: none
// for "" (the proxy then asks the sandbox's resolvers), else the one
// server the proxy asks instead.
func ParseUpstreamResolver(key, value string) ([]netip.AddrPort, error) {
	if value == "" {
		return nil, nil
	}
	return ParseServers(key, value)
}

// ParseNAT64Prefixes parses the NAT64 prefixes given under key: IPv6
// prefixes of a length RFC 6052 lays out (/32, /40, /48, /56, /64 or
// /96), without host bits (see guard.ValidateNAT64Prefix). The error is a
// *FieldError.
func ParseNAT64Prefixes(key string, values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: "not an IPv6 prefix (such as 64:ff9b::/96 or 2001:db8:64::/96)"}
		}
		if err := guard.ValidateNAT64Prefix(p); err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: err.Error()}
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseAddrs parses the IP addresses given under key (resolvers a sandbox
// may query), IPv4-mapped ones as IPv4. The error is a *FieldError.
func ParseAddrs(key string, values []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, v := range values {
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: "not an IP address"}
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

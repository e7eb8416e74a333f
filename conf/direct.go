package conf

import (
	"net/netip"
	"strings"
)

// Direct is one allowDirect destination: an IP address or CIDR prefix,
// with the ports it may be reached on, that a sandbox reaches without the
// proxy (TCP and UDP, on both of doorman's layers). Only addresses can
// bypass the proxy: a name entry needs the proxy to read the name a
// connection carries and to resolve it itself.
type Direct struct {
	// Prefix is masked, a single address is a /32 or /128, and
	// IPv4-mapped IPv6 is turned into IPv4 (as for Entry.Prefix).
	Prefix netip.Prefix
	// Ports is the zero value for every port.
	Ports PortRange
}

// reasonNotDirect is why a name or wildcard entry cannot be a Direct.
const reasonNotDirect = "only an IP address or CIDR (with an optional port) can bypass the proxy"

// ParseDirect parses one allowDirect entry: an IP address or CIDR prefix
// in the entry grammar (see ParseEntry), with an optional port or range
// ("10.0.0.5:5432", "2001:db8::/64", "[2001:db8::1]:443"). It is the one
// place where the rule that only addresses bypass the proxy is checked.
// Errors are *EntryError values naming the entry.
func ParseDirect(s string) (Direct, error) {
	e, err := ParseEntry(s)
	if err != nil {
		return Direct{}, err
	}
	if e.Kind != KindPrefix {
		return Direct{}, &EntryError{Entry: e.Raw, Reason: reasonNotDirect}
	}
	return Direct{Prefix: e.Prefix, Ports: e.Ports}, nil
}

// Entry is d as an allowlist entry (KindPrefix), for the code that
// matches entries against flows.
func (d Direct) Entry() Entry {
	e := Entry{Kind: KindPrefix, Prefix: d.Prefix, Ports: d.Ports}
	e.Raw = e.String()
	return e
}

// String returns d in the canonical entry form, which ParseDirect reads
// back as an equal Direct: "10.0.0.5:5432", "2001:db8::/64",
// "[2001:db8::1]:443".
func (d Direct) String() string { return d.Entry().Raw }

// JoinDirect lists ds as their Strings joined by commas ("" for none),
// for a log record or a message.
func JoinDirect(ds []Direct) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

// MarshalText renders d as String does, so that a Direct is a string in
// JSON.
func (d Direct) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses text as ParseDirect does. On error d is left
// unchanged.
func (d *Direct) UnmarshalText(text []byte) error {
	p, err := ParseDirect(string(text))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

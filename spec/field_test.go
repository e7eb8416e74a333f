package spec

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// Every front door names its own key, with the same value and reason.
func TestFieldErrors(t *testing.T) {
	const reason = "only an IP address or CIDR (with an optional port) can bypass the proxy"
	for _, key := range []string{"allowDirect", "annotation doorman.io/allow-direct", "--allow-direct"} {
		_, err := ParseAllowDirect(key, []string{"203.0.113.7:5432", "db.example.com"})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != key || fe.Value != "db.example.com" || fe.Reason != reason ||
			err.Error() != key+` "db.example.com": `+reason {
			t.Errorf("%s: %v", key, err)
		}
	}
	if _, err := ParseAllowDirect("allowDirect", []string{" 203.0.113.7:99999 "}); err == nil ||
		err.Error() != `allowDirect "203.0.113.7:99999": port out of range: 99999 (want 1-65535)` {
		t.Errorf("a bad port: %v", err)
	}
	got, err := ParseAllowDirect("allowDirect", []string{"203.0.113.7:5432", "2001:db8::/64"})
	if err != nil || len(got) != 2 || got[0].String() != "203.0.113.7:5432" || got[1].String() != "2001:db8::/64" {
		t.Errorf("valid entries: %v, %v", got, err)
	}

	const want = `--upstream-resolver "dns.example:53": "dns.example" is not an IP address (name the server by its address); want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353`
	if _, err := ParseUpstreamResolver("--upstream-resolver", "dns.example:53"); err == nil || err.Error() != want {
		t.Errorf("bad upstream resolver: %v\nwant %s", err, want)
	}
	if ups, err := ParseUpstreamResolver("upstreamResolver", ""); ups != nil || err != nil {
		t.Errorf("no upstream resolver: %v, %v", ups, err)
	}
	if ups, err := ParseServers("--resolver", "203.0.113.53", "[2001:db8::53]:5353"); err != nil ||
		!slices.Equal(ups, addrPorts("203.0.113.53:53", "[2001:db8::53]:5353")) {
		t.Errorf("servers: %v, %v", ups, err)
	}
	if _, err := ParseAddrs("--dns", []string{"203.0.113.53", "dns.example"}); err == nil || err.Error() != `--dns "dns.example": not an IP address` {
		t.Errorf("bad address: %v", err)
	}
}

func addrPorts(ss ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddrPort(s)
	}
	return out
}

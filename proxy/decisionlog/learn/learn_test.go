package learn

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// seen builds a decision as the proxy logs it.
func seen(verdict, reason, name, dst string) decisionlog.Decision {
	return decisionlog.Decision{Verdict: verdict, Reason: reason, Name: name, Dst: dst}
}

func hosts(l Result) string { return strings.Join(l.Policy().Hosts(), " ") }

// roundTrip renders the learned policy as `doorman learn` prints it and
// parses it back as `doorman set` reads it.
func roundTrip(t *testing.T, l Result) *conf.Policy {
	t.Helper()
	p, err := conf.ParseFile(l.Policy().MarshalFile())
	if err != nil {
		t.Fatalf("learned policy does not parse: %v\n%s", err, l.Policy().MarshalFile())
	}
	if p.Mode != conf.ModeAllowlist {
		t.Fatalf("learned mode %s", p.Mode)
	}
	return p
}

func TestLearn(t *testing.T) {
	ds := []decisionlog.Decision{
		// Mode open: everything allowed and logged.
		seen(decisionlog.Allow, "mode open", "api.example.test", "203.0.113.10:443"),
		seen(decisionlog.Allow, "mode open", "API.Example.Test", "203.0.113.10:443"), // same, differently spelled
		seen(decisionlog.Allow, "mode open", "api.example.test", "[2001:db8:100::10]:443"),
		seen(decisionlog.Allow, "mode open", "api.example.test", "203.0.113.10:80"),
		seen(decisionlog.Allow, "mode open", "cdn.example.org", "203.0.113.40:443"),
		seen(decisionlog.Allow, "mode open", "", "203.0.113.30:22"),            // no name: by address
		seen(decisionlog.Allow, "mode open", "", "[::ffff:203.0.113.31]:5432"), // mapped: IPv4
		seen(decisionlog.Allow, "mode open", "", "[2001:db8:100::20]:443"),
		seen(decisionlog.Error, "resolve gone.example.test: no such host", "gone.example.test", "203.0.113.50:443"),
		// Allowlist mode: allowed, refused for want of an entry, closed
		// by a policy change.
		seen(decisionlog.Allow, "name allowed", "git.example.net", "203.0.113.60:443"),
		seen(decisionlog.Deny, "name not allowed", "evil.example.test", "203.0.113.20:443"),
		seen(decisionlog.Deny, "request for other.example.test: name not allowed", "other.example.test", "203.0.113.30:80"),
		seen(decisionlog.Deny, "no name and no address rule matches (no name within 10s)", "", "203.0.113.70:443"),
		seen(decisionlog.Deny, "policy changed: name not allowed", "old.example.test", "203.0.113.80:443"),
		// Nothing an entry could change.
		seen(decisionlog.Deny, "mode none", "x.example.test", "203.0.113.90:443"),
		seen(decisionlog.Deny, "policy changed: mode none", "y.example.test", "203.0.113.91:443"),
		seen(decisionlog.Deny, "no permissible upstream: 127.0.0.1 is loopback", "local.example.test", "203.0.113.92:443"),
		seen(decisionlog.Deny, "malformed request: bad header", "", "203.0.113.93:80"),
		seen(decisionlog.Deny, "no answer to an upgrade request", "ws.example.test", "203.0.113.94:80"),
		seen(decisionlog.Deny, "no original destination", "", "invalid AddrPort"),
		seen(decisionlog.Allow, "mode open", "bad name!", "203.0.113.95:443"),
		seen(decisionlog.Allow, "allowDirect", "", "203.0.113.96:5432"), // bypassed the proxy: an allowDirect entry has it
		// Private upstreams and answers: only an address entry inside the
		// range could admit them, and that is not proposed.
		seen(decisionlog.Deny, "private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)", "rebind.example.test", "203.0.113.97:443"),
		seen(decisionlog.Deny, "private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)", "", "10.0.0.5:6379"),
		seen(decisionlog.Deny, "policy changed: private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)", "lan.example.test", "203.0.113.98:80"),
		{Kind: decisionlog.KindDNS, Verdict: decisionlog.Deny, Reason: "private answer 10.0.0.5: RFC 1918 (10.0.0.0/8)", Name: "rebind.example.test", QType: "A"},
	}
	l := From(ds, Options{})
	want := "git.example.net:443 " +
		"cdn.example.org:443 " +
		"api.example.test:80 api.example.test:443 evil.example.test:443 gone.example.test:443 old.example.test:443 other.example.test:80 " +
		"203.0.113.30:22 203.0.113.31:5432 203.0.113.70:443 [2001:db8:100::20]:443"
	if got := hosts(l); got != want {
		t.Errorf("learned\n got %s\nwant %s", got, want)
	}
	if l.Used != 14 || l.Skipped != 7 || l.Private != 5 {
		t.Errorf("used %d, skipped %d, private %d; want 14, 7, 5", l.Used, l.Skipped, l.Private)
	}

	// What was seen gets through, and nothing else: other ports, other
	// names, the parent domain, a name below a seen one, other addresses.
	p := roundTrip(t, l)
	for _, d := range ds[:14] {
		dst, _ := d.DstAddrPort()
		if d.Name != "" {
			n, _ := conf.NormalizeName(d.Name)
			if _, ok := p.MatchName(n, dst.Port()); !ok {
				t.Errorf("learned policy refuses %s port %d", n, dst.Port())
			}
		} else if _, ok := p.MatchAddr(dst.Addr(), dst.Port()); !ok {
			t.Errorf("learned policy refuses %v", dst)
		}
	}
	for _, c := range []struct {
		name string
		port uint16
	}{
		{"api.example.test", 8443}, {"evil.example.test", 80}, {"example.test", 443},
		{"www.api.example.test", 443}, {"x.example.test", 443}, {"y.example.test", 443},
		{"local.example.test", 443}, {"ws.example.test", 80}, {"cdn.example.org", 80},
		{"rebind.example.test", 443}, {"lan.example.test", 80},
	} {
		if e, ok := p.MatchName(c.name, c.port); ok {
			t.Errorf("learned policy admits %s port %d (by %s)", c.name, c.port, e)
		}
	}
	for _, a := range []string{"203.0.113.30:443", "203.0.113.31:22", "203.0.113.10:443", "203.0.113.93:80", "[2001:db8:100::21]:443", "10.0.0.5:6379"} {
		ap := netip.MustParseAddrPort(a)
		if e, ok := p.MatchAddr(ap.Addr(), ap.Port()); ok {
			t.Errorf("learned policy admits %v (by %s)", ap, e)
		}
	}

	// Only the denials.
	if l := From(ds, Options{Denied: true}); hosts(l) != "evil.example.test:443 old.example.test:443 other.example.test:80 203.0.113.70:443" || l.Private != 5 {
		t.Errorf("denied only: %s (private %d)", hosts(l), l.Private)
	}
	// Without ports.
	if got := hosts(From(ds[:8], Options{AnyPort: true})); got != "cdn.example.org api.example.test 203.0.113.30 203.0.113.31 2001:db8:100::20" {
		t.Errorf("any port: %s", got)
	}
	// Nothing seen: an empty allowlist.
	if l := From(nil, Options{}); len(l.Entries) != 0 || l.Used != 0 {
		t.Errorf("nothing seen: %+v", l)
	}
}

func TestLearnWildcards(t *testing.T) {
	open := func(names ...string) []decisionlog.Decision {
		var ds []decisionlog.Decision
		for _, n := range names {
			port := "443"
			if n, p, ok := strings.Cut(n, ":"); ok {
				ds = append(ds, seen(decisionlog.Allow, "mode open", n, "203.0.113.10:"+p))
				continue
			}
			ds = append(ds, seen(decisionlog.Allow, "mode open", n, "203.0.113.10:"+port))
		}
		return ds
	}
	tests := []struct {
		names []string
		want  string
	}{
		// One name below a parent stays itself.
		{[]string{"api.example.com"}, "api.example.com:443"},
		// Two share the narrowest parent; the apex stays listed apart.
		{[]string{"a.example.com", "b.example.com", "example.com"}, "example.com:443 *.example.com:443"},
		// The deepest parent with two names wins; the stray one stays.
		{[]string{"a.x.example.com", "b.x.example.com", "c.y.example.com"}, "*.x.example.com:443 c.y.example.com:443"},
		// A parent takes what deeper wildcards left, if two or more.
		{[]string{"a.x.example.com", "b.x.example.com", "c.y.example.com", "d.example.com"}, "*.example.com:443 *.x.example.com:443"},
		// Never above the registrable domain.
		{[]string{"example.com", "example.org", "foo.com"}, "example.com:443 foo.com:443 example.org:443"},
		{[]string{"a.example.co.uk", "b.example.co.uk", "other.co.uk"}, "*.example.co.uk:443 other.co.uk:443"},
		{[]string{"bucket1.s3.amazonaws.com", "bucket2.s3.amazonaws.com"}, "bucket1.s3.amazonaws.com:443 bucket2.s3.amazonaws.com:443"},
		// Per port.
		{[]string{"a.example.com", "b.example.com:80", "c.example.com"}, "*.example.com:443 b.example.com:80"},
	}
	for _, tt := range tests {
		l := From(open(tt.names...), Options{Wildcards: true})
		if got := hosts(l); got != tt.want {
			t.Errorf("wildcards of %v\n got %s\nwant %s", tt.names, got, tt.want)
		}
		// Whatever was collapsed still admits everything seen.
		p := roundTrip(t, l)
		for _, d := range open(tt.names...) {
			dst, _ := d.DstAddrPort()
			if _, ok := p.MatchName(d.Name, dst.Port()); !ok {
				t.Errorf("wildcards of %v: %s port %d refused", tt.names, d.Name, dst.Port())
			}
		}
	}
}

// query builds a DNS decision as the filter logs it.
func query(verdict, reason, name, qtype string) decisionlog.Decision {
	return decisionlog.Decision{Kind: decisionlog.KindDNS, Verdict: verdict, Reason: reason, Name: name, QType: qtype}
}

func TestLearnDNS(t *testing.T) {
	ds := []decisionlog.Decision{
		// Seen connecting: the connection's entry admits it; the refused
		// lookup adds nothing.
		seen(decisionlog.Allow, "name allowed", "api.example.test", "203.0.113.10:443"),
		query(decisionlog.Deny, "name not allowed", "evil.example.test", "A"),
		seen(decisionlog.Deny, "name not allowed", "evil.example.test", "203.0.113.20:443"),
		// Only looked up: no port.
		query(decisionlog.Deny, "name not allowed", "Blocked.Example.Test.", "AAAA"),
		query(decisionlog.Deny, "name not allowed", "blocked.example.test", "A"), // twice: once
		query(decisionlog.Deny, "name not allowed", "svc.example.net", "HTTPS"),
		query(decisionlog.Deny, "name not allowed", "svc2.example.net", "SVCB"),
		// Not learned.
		// Search-list expansions of names not admitted, of a name also
		// looked up and of one seen connecting.
		query(decisionlog.Deny, "name not allowed", "github.com.default.svc.cluster.local", "A"),
		query(decisionlog.Deny, "name not allowed", "github.com.svc.cluster.local", "AAAA"),
		query(decisionlog.Deny, "name not allowed", "github.com", "A"),
		query(decisionlog.Deny, "name not allowed", "evil.example.test.corp.test", "A"),
		query(decisionlog.Allow, "name allowed", "api.example.test", "A"),
		query(decisionlog.Allow, "mode open", "open.example.test", "A"),
		query(decisionlog.Deny, "name not allowed: api.example.test with a search-list suffix (answered NXDOMAIN)", "api.example.test.svc.cluster.local", "A"),
		query(decisionlog.Deny, "name not allowed", "7.113.0.203.in-addr.arpa", "PTR"),
		query(decisionlog.Deny, "name not allowed", "113.0.203.in-addr.arpa", "A"),
		query(decisionlog.Deny, "name not allowed", "1.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa", "AAAA"),
		query(decisionlog.Deny, "name not allowed", "aGVsbG8.t.attacker.example", "TXT"),
		query(decisionlog.Deny, "name not allowed", "mx.example.test", "MX"),
		query(decisionlog.Deny, "mode none", "none.example.test", "A"),
		query(decisionlog.Deny, "class CH is not served (only IN)", "version.bind", "A"),
		query(decisionlog.Deny, "name not allowed", "bad name!", "A"),
		query(decisionlog.Deny, "name not allowed", "203.0.113.5", "A"),
		query(decisionlog.Error, "no upstream answered", "gone.example.test", "A"),
	}
	l := From(ds, Options{})
	if got, want := hosts(l), "github.com svc.example.net svc2.example.net api.example.test:443 blocked.example.test evil.example.test:443"; got != want {
		t.Errorf("learned\n got %s\nwant %s", got, want)
	}
	if l.Used != 2 || l.Skipped != 0 || l.UsedDNS != 6 || l.QueriedOnly != 4 {
		t.Errorf("used %d, skipped %d, used DNS %d, queried only %d; want 2, 0, 6, 4", l.Used, l.Skipped, l.UsedDNS, l.QueriedOnly)
	}
	// The names only looked up are admitted on every port; the learned
	// policy admits no name the lookups did not ask for.
	p := roundTrip(t, l)
	for _, n := range []string{"blocked.example.test", "svc.example.net", "svc2.example.net"} {
		if _, ok := p.MatchName(n, 8443); !ok {
			t.Errorf("learned policy refuses %s", n)
		}
	}
	if e, ok := p.MatchName("evil.example.test", 80); ok {
		t.Errorf("learned policy admits evil.example.test:80 (by %s)", e)
	}
	for _, n := range []string{"github.com.svc.cluster.local", "evil.example.test.corp.test", "open.example.test", "aGVsbG8.t.attacker.example", "mx.example.test", "none.example.test", "gone.example.test", "api.example.test.svc.cluster.local"} {
		if e, ok := p.MatchName(strings.ToLower(n), 443); ok {
			t.Errorf("learned policy admits %s (by %s)", n, e)
		}
	}

	// Denials only, any port: the refused connection's name once.
	if got := hosts(From(ds, Options{Denied: true, AnyPort: true})); got != "github.com svc.example.net svc2.example.net blocked.example.test evil.example.test" {
		t.Errorf("denied, any port: %s", got)
	}
	// Wildcards collapse the names only looked up among themselves.
	if got := hosts(From(ds, Options{Wildcards: true})); got != "github.com *.example.net *.example.test:443 blocked.example.test" {
		t.Errorf("wildcards: %s", got)
	}
	// Nothing but refused lookups is something to learn from.
	if l := From(ds[3:4], Options{}); hosts(l) != "blocked.example.test" || l.Used != 0 || l.UsedDNS != 1 {
		t.Errorf("lookups only: %+v", l)
	}
}

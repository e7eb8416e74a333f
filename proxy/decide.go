package proxy

import (
	"net/netip"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Verdict is the outcome of a policy decision.
type Verdict string

// The two verdicts a connection can get.
const (
	Allow Verdict = decisionlog.Allow
	Deny  Verdict = decisionlog.Deny
)

// decision is what the policy says about one connection (or one request of a
// plaintext keep-alive connection).
type decision struct {
	verdict Verdict
	rule    string // the entry that admitted it, "" if none
	reason  string // why, in words an operator can act on
	// dialName is set when a name rule admitted the connection: the proxy
	// resolves this name itself and dials its addresses, never the
	// client's choice of IP. Otherwise the original destination is dialed.
	dialName string
}

// decide applies policy p to a connection whose sniffed name is name ("" when
// there is none: no SNI, unknown protocol, h2c, sniff deadline passed) and
// whose original destination is dst.
//
// A name rule admits a connection by its name and original port; only
// IP/CIDR rules can admit a connection by its destination address, with or
// without a name.
func decide(p *conf.Policy, name string, dst netip.AddrPort) decision {
	switch p.Mode {
	case conf.ModeNone:
		return decision{verdict: Deny, reason: decisionlog.ReasonModeNone}
	case conf.ModeOpen:
		return decision{verdict: Allow, reason: "mode open"}
	}
	if name != "" {
		if e, ok := p.MatchName(name, dst.Port()); ok {
			return decision{verdict: Allow, rule: e.String(), reason: "name allowed", dialName: name}
		}
	}
	if e, ok := p.MatchAddr(dst.Addr(), dst.Port()); ok {
		return decision{verdict: Allow, rule: e.String(), reason: "address allowed"}
	}
	if name == "" {
		return decision{verdict: Deny, reason: decisionlog.ReasonNoRule}
	}
	return decision{verdict: Deny, reason: decisionlog.ReasonNameNotAllowed}
}

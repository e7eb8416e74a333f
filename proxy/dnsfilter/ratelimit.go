package dnsfilter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// rateLimit is a token bucket: rate tokens a second, at most burst of
// them saved up, one taken per query.
type rateLimit struct {
	rate, burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newRateLimit returns a bucket of perSecond queries a second, saving up
// at most a second's worth; nil for perSecond <= 0 (no cap).
func newRateLimit(perSecond int) *rateLimit {
	if perSecond <= 0 {
		return nil
	}
	r := float64(perSecond)
	return &rateLimit{rate: r, burst: r, tokens: r}
}

// allow takes a token if there is one. A nil bucket always allows.
func (r *rateLimit) allow(now time.Time) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() {
		r.tokens = min(r.burst, r.tokens+now.Sub(r.last).Seconds()*r.rate)
	}
	r.last = now
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

// overRate answers a query past the rate: REFUSED, with an Extended DNS
// Error that says why if the client speaks EDNS, or nothing for a
// message that is not a query. The query is not forwarded and gets no
// decision line: the refusals are counted and the limit line says so,
// once an interval (see decisionlog.Aggregator).
func (f *Filter) overRate(query []byte, proto string) []byte {
	f.limited.Add(1)
	decisionlog.Limit{Sandbox: f.sandbox, Limit: decisionlog.LimitDNSRate, Max: int64(f.rate.rate)}.Log(context.Background(), f.logger)
	if len(query) < headerLen {
		return nil
	}
	req := new(dns.Msg)
	err := req.Unpack(query)
	if req.Response {
		return nil
	}
	if err != nil {
		out, _ := pack(formErr(req), nil, proto)
		return out
	}
	m := newReply(req, dns.RcodeRefused)
	if opt := m.IsEdns0(); opt != nil {
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{
			InfoCode:  dns.ExtendedErrorCodeOther,
			ExtraText: fmt.Sprintf("doorman: sandbox %s is over its limit of %d DNS queries a second", f.sandbox, int(f.rate.rate)),
		})
	}
	out, _ := pack(m, req, proto)
	return out
}

package integration

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/integration/testnet"
)

// A sandbox that holds connections past its cap gets a TLS alert (an
// HTTP client a 503) for each one past it, logged in one limit line,
// while a neighbour on the same network is served; once the flood ends
// the sandbox is served again.
func TestFloodConnections(t *testing.T) {
	b := newFloodBed(t, "")
	const max = 40
	flooder := b.sandbox(map[string]any{"connections": max})
	neighbour := b.sandbox(map[string]any{"connections": max})

	conns := flooder.hold(max + 20)
	if n := b.waitRecorded(max); n != max {
		t.Fatalf("the recorder saw %d connections, want the %d under the cap", n, max)
	}
	if got := outcomes(conns, 3*time.Second); got[outcomeOpen] != max || got[outcomeAlert] != 20 {
		t.Fatalf("outcomes %v: want %d relayed and 20 refused with an alert", got, max)
	}
	resp, err := flooder.client().Get("http://" + apiName + "/")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP at the cap: %v, %v; want a 503", resp, err)
	}
	resp.Body.Close()
	if _, err := neighbour.get(neighbour.client()); err != nil {
		t.Fatalf("the neighbour during the flood: %v", err)
	}
	l := flooder.waitLimitLine("connections")
	if l["max"] != float64(max) {
		t.Errorf("limit line %v", l)
	}
	// 21 refusals, one line: the rest are counted until the interval ends.
	if n := len(flooder.limitLines("connections")); n != 1 {
		t.Errorf("%d limit lines for 21 refusals within an interval", n)
	}
	if n := b.api.Connections(testnet.PortRecorder); n != max {
		t.Errorf("the recorder saw %d connections, want %d", n, max)
	}

	closeAll(conns)
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, lastErr = flooder.get(flooder.client()); lastErr == nil {
			return
		}
	}
	t.Fatalf("the flooder after its connections closed: %v", lastErr)
}

// A proxy whose descriptor limit is low (1400, soft and hard) lowers its
// connection cap to what fits beside its reserve, and so never runs out:
// 200 connections held give 123 relayed and the rest refused, the DNS
// filter still forwards, no connection fails for want of a descriptor
// (the guard lists the host's addresses for every dial), and an allowed
// request is served at once when the flood ends.
func TestFloodDescriptors(t *testing.T) {
	b := newFloodBed(t, "")
	b.limitNoFile(1400)
	flooder := b.sandbox(nil)
	const fit = (1400 - 1153) / 2
	limits := flooder.waitLine("limits")
	if limits["connections"] != float64(fit) || limits["nofile"] != 1400.0 || limits["limitedBy"] == nil {
		t.Fatalf("limits line %v, want %d connections in 1400 descriptors", limits, fit)
	}
	conns := flooder.hold(200)
	if n := b.waitRecorded(fit); n != fit {
		t.Fatalf("the recorder saw %d connections, want %d", n, fit)
	}
	if got := outcomes(conns, 3*time.Second); got[outcomeOpen] != fit {
		t.Fatalf("outcomes %v: want %d relayed", got, fit)
	}
	// The DNS filter forwards from the same process: it has its
	// descriptors still.
	if r, err := flooder.ns.QueryDNS(t.Context(), b.net.DNS, apiName, dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Errorf("the flooder's DNS during the flood: %v, %v", r, err)
	}
	closeAll(conns)
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, lastErr = flooder.get(flooder.client()); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("the flooder after the flood: %v", lastErr)
	}
	for _, l := range flooder.lines() {
		if l["verdict"] == "error" || strings.Contains(fmt.Sprint(l), "too many open files") {
			t.Errorf("a line of a proxy short of descriptors: %v", l)
		}
	}
}

// ClientHellos trickled in 1-byte records, more than the bytes the
// proxy holds for connections not decided yet allow, are refused (an
// alert, or a reset for those refused before their first byte) or
// relayed; none hangs. A neighbour is served while they trickle.
func TestFloodTrickledHellos(t *testing.T) {
	b := newFloodBed(t, "")
	flooder := b.sandbox(map[string]any{"pendingBytes": 128 << 10})
	neighbour := b.sandbox(nil)

	stop := make(chan struct{})
	var served, failed int
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		client := neighbour.client()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := neighbour.get(client); err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			} else {
				served++
			}
		}
	})
	const n = 40
	conns, reset := flooder.trickle(n, time.Millisecond, nil)
	close(stop)
	wg.Wait()
	if failed > 0 || served == 0 {
		t.Fatalf("the neighbour while hellos trickled: %d served, %d failed (%v)", served, failed, firstErr)
	}
	got := outcomes(conns, 3*time.Second)
	got[outcomeClosed] += reset
	relayed := b.waitRecorded(got[outcomeOpen])
	if got[outcomeAlert]+got[outcomeClosed] == 0 || got[outcomeOpen] != relayed || relayed+got[outcomeAlert]+got[outcomeClosed] != n {
		t.Fatalf("outcomes %v, %d relayed: want each of %d refused or relayed, some refused", got, relayed, n)
	}
	t.Logf("%d trickled hellos: %v", n, got)
	flooder.waitLimitLine("pendingBytes")
}

// One sandbox holding connections to one upstream takes at most its
// share of the host namespace's ephemeral ports, so a neighbour still
// reaches that upstream. The range is narrowed to 64 ports, so the
// default share is 8.
func TestFloodUpstreamPorts(t *testing.T) {
	b := newFloodBed(t, "40000 40063")
	flooder := b.sandbox(nil)
	neighbour := b.sandbox(nil)
	const share = 64 / 8

	conns := flooder.hold(3 * share)
	if n := b.waitRecorded(share); n != share {
		t.Fatalf("the recorder saw %d connections, want the flooder's share of %d", n, share)
	}
	if got := outcomes(conns, 3*time.Second); got[outcomeOpen] != share || got[outcomeAlert] != 2*share {
		t.Fatalf("outcomes %v: want %d relayed and %d refused with an alert", got, share, 2*share)
	}
	if l := flooder.waitLimitLine("perUpstream"); l["max"] != float64(share) {
		t.Errorf("limit line %v", l)
	}
	theirs := neighbour.hold(share)
	if n := b.waitRecorded(2 * share); n != 2*share {
		t.Fatalf("the recorder saw %d connections, want the neighbour's %d too", n, share)
	}
	if got := outcomes(theirs, time.Second); got[outcomeOpen] != share {
		t.Fatalf("the neighbour's connections: %v, want all %d relayed", got, share)
	}
	if _, err := neighbour.get(neighbour.client()); err != nil {
		t.Fatalf("the neighbour's HTTPS: %v", err)
	}
}

// A DNS flood past the rate is answered REFUSED with an Extended DNS
// Error, the log stays a handful of lines, and a neighbour's queries are
// answered.
func TestFloodDNS(t *testing.T) {
	b := newFloodBed(t, "")
	flooder := b.sandbox(map[string]any{"dnsQueriesPerSecond": 50})
	neighbour := b.sandbox(nil)

	const n = 3000
	got := flooder.dnsFlood(n, evilName, 2*time.Second)
	// UDP under a flood loses some; of the answers, every one is a
	// refusal, and most are for the rate.
	if got["limited"] < n/3 || got["limited"]+got["REFUSED"] != total(got) {
		t.Fatalf("answers %v to %d queries: want only refusals, most of them for the rate", got, n)
	}
	t.Logf("%d queries: %v", n, got)
	l := flooder.waitLimitLine("dnsQueriesPerSecond")
	if l["max"] != 50.0 {
		t.Errorf("limit line %v", l)
	}
	if lines := flooder.lines(); len(lines) > 20 {
		t.Errorf("%d log lines for %d queries; want a handful", len(lines), n)
	}
	r, err := neighbour.ns.QueryDNS(t.Context(), b.net.DNS, apiName, dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("the neighbour's query: %v, %v", r, err)
	}
}

// total sums the counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

package main

import (
	"fmt"
	"net/netip"
	"sync"
)

// tryRebindNAT64 is rebind for the names whose DNS answers the LAN's
// address embedded in an IPv6 NAT64 prefix (-rebind-nat64): what a NAT64
// on the host's path would deliver to the LAN.
func tryRebindNAT64(cfg *config) row {
	var t tally
	if len(cfg.rebindNAT64) == 0 {
		t.note("skipped: no -rebind-nat64 names")
		return t.row("rebind-nat64")
	}
	results := make([]tally, len(cfg.rebindNAT64))
	var wg sync.WaitGroup
	for i, name := range cfg.rebindNAT64 {
		wg.Go(func() { rebindName(&results[i], cfg, name) })
	}
	wg.Wait()
	for _, r := range results {
		t.sent += r.sent
		t.errs = append(t.errs, r.errs...)
		t.detail = append(t.detail, r.detail...)
	}
	return t.row("rebind-nat64")
}

// tryOpenNAT64 connects to each -nat64 address itself, as a workload in
// mode open names its destination: HTTP to port 80 (with the address as
// Host), and Redis commands to port 6379.
func tryOpenNAT64(cfg *config) row {
	var t tally
	if len(cfg.nat64) == 0 {
		t.note("skipped: no -nat64 addresses")
		return t.row("open-nat64")
	}
	for _, a := range cfg.nat64 {
		dst := netip.AddrPortFrom(a, cfg.httpPort)
		if c, err := dial(cfg, dst, nil); err != nil {
			t.fail("HTTP connect to "+dst.String(), err)
		} else {
			req := fmt.Sprintf("POST /escape-nat64 HTTP/1.1\r\nHost: [%s]\r\nContent-Length: 40\r\nConnection: close\r\n\r\n%-40s", a, "secret="+randomHex(8))
			sendAndWatch(&t, "HTTP to "+dst.String(), c, []byte(req), cfg.timeout)
			c.Close()
		}
		dst = netip.AddrPortFrom(a, cfg.redisPort)
		c, err := dial(cfg, dst, nil)
		if err != nil {
			t.fail("Redis connect to "+dst.String(), err)
			continue
		}
		redis := "*3\r\n$3\r\nSET\r\n$6\r\nsecret\r\n$16\r\n" + randomHex(8) + "\r\n*1\r\n$4\r\nINFO\r\n"
		sendAndWatch(&t, "Redis to "+dst.String(), c, []byte(redis), cfg.timeout)
		c.Close()
	}
	return t.row("open-nat64")
}

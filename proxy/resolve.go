package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// maxCachedNames bounds the resolver cache; when full it is emptied.
const maxCachedNames = 4096

// cachingResolver resolves the names that name rules admit, reusing each
// answer for a short TTL so that a burst of connections to one host does not
// cost a DNS round trip each.
type cachingResolver struct {
	r   Resolver
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]cachedAddrs
}

type cachedAddrs struct {
	addrs   []netip.Addr
	expires time.Time
}

// newCachingResolver caches r's answers for ttl; a nil r is the Go
// resolver reading the host's /etc/resolv.conf.
func newCachingResolver(r Resolver, ttl time.Duration) *cachingResolver {
	if r == nil {
		r = &net.Resolver{PreferGo: true}
	}
	return &cachingResolver{r: r, ttl: ttl, entries: make(map[string]cachedAddrs)}
}

// cached returns the addresses of host while the cache has them, or nil.
func (c *cachingResolver) cached(network, host string) []netip.Addr {
	if c.ttl <= 0 {
		return nil
	}
	c.mu.Lock()
	e, ok := c.entries[network+" "+host]
	c.mu.Unlock()
	if !ok || !time.Now().Before(e.expires) {
		return nil
	}
	return e.addrs
}

// LookupNetIP returns the addresses of host.
func (c *cachingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if c.ttl <= 0 {
		return c.r.LookupNetIP(ctx, network, host)
	}
	key := network + " " + host
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs, nil
	}
	addrs, err := c.r.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.entries) >= maxCachedNames {
		clear(c.entries)
	}
	c.entries[key] = cachedAddrs{addrs: addrs, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return addrs, nil
}

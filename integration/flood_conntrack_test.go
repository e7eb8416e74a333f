package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A sandbox's DNS flood for an allowed name, at the default rate, holds a
// handful of the host's conntrack entries, not one a forwarded query: the
// DNS filter forwards from the host's namespace, whose table
// (nf_conntrack_max, 65536 on a host of 2 to 4 GiB) every sandbox's proxy
// and the host itself share, and a UDP entry lives 30 s after its last
// packet. One socket a query let one sandbox hold some 30,000 of them.
func TestFloodDNSConntrack(t *testing.T) {
	b := newFloodBed(t, "")
	s := b.sandbox(nil)
	count := func() int {
		t.Helper()
		var n int
		if err := b.net.InHost(func() error {
			data, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
			if err != nil {
				return err
			}
			n, err = strconv.Atoi(strings.TrimSpace(string(data)))
			return err
		}); err != nil {
			t.Fatalf("the host namespace's conntrack count: %v", err)
		}
		return n
	}
	before := count()
	got := s.dnsFlood(3000, apiName, 2*time.Second)
	if got["NOERROR"] < 500 {
		t.Fatalf("answers %v: want hundreds forwarded", got)
	}
	after := count()
	t.Logf("%d queries answered %v; the host's conntrack entries %d -> %d", 3000, got, before, after)
	if after-before > 50 {
		t.Errorf("%d queries forwarded hold %d more conntrack entries in the host's namespace, want a handful", got["NOERROR"], after-before)
	}
}

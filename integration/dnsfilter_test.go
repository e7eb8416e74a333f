package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestDNSFilterSearchList: with doorman's defaults (the DNS filter on), a
// container whose resolv.conf has a search list and ndots:5, as every
// Kubernetes pod's has, still resolves an allowed name through glibc's stub
// resolver: the expansions it asks first (api.example.test.corp.test, …)
// are answered NXDOMAIN without being forwarded (musl, unlike glibc, would
// wait out its timeout on REFUSED), and the name as given is forwarded. A denied name fails, and nothing of
// it is forwarded.
func TestDNSFilterSearchList(t *testing.T) {
	skipUnlessRoot(t)
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	if st := e.state(c); !st.DNSFilter {
		t.Fatalf("DNS filter off by default: state %+v", st)
	}
	conf := fmt.Sprintf("nameserver %s\nsearch corp.test svc.corp.test\noptions ndots:5 timeout:1 attempts:1\n", e.net.DNS)
	if err := os.WriteFile(filepath.Join("/etc/netns", c.ns.Name(), "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	getent := func(name string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := c.ns.Command(ctx, "getent", "ahostsv4", name).CombinedOutput()
		return string(out), err
	}

	out, err := getent(apiName)
	if err != nil || !strings.Contains(out, apiAddr4.String()) {
		t.Fatalf("getent ahostsv4 %s with a search list: %v, %q; want %s", apiName, err, out, apiAddr4)
	}
	e.waitDNSDecision(c, apiName+".corp.test", "deny")
	e.waitDNSDecision(c, apiName, "allow")

	if out, err := getent(evilName); err == nil {
		t.Errorf("getent ahostsv4 %s: %q, want a failed lookup", evilName, out)
	}
	e.waitDNSDecision(c, evilName, "deny")

	// The answers themselves: NXDOMAIN for the expansion, REFUSED for
	// the names no entry could admit.
	for name, want := range map[string]int{
		apiName + ".corp.test": dns.RcodeNameError,
		evilName:               dns.RcodeRefused,
		"x1.tunnel.test":       dns.RcodeRefused,
		apiName:                dns.RcodeSuccess,
	} {
		var r *dns.Msg
		err := c.ns.Do(func() error {
			m := new(dns.Msg)
			m.SetQuestion(dns.Fqdn(name), dns.TypeA)
			var err error
			r, _, err = (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, net.JoinHostPort(e.net.DNS.String(), "53"))
			return err
		})
		if err != nil {
			t.Errorf("query %s from the container: %v", name, err)
		} else if r.Rcode != want {
			t.Errorf("query %s from the container: %s, want %s", name, dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
		}
	}
}

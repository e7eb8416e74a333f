package integration

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/hook"
)

// TestDockerResolvesWithContainerDNS: a Docker container started with
// `--dns <the fake internet's resolver>` reaches an allowed name only that
// resolver knows, though the proxy runs in the root namespace, whose
// /etc/resolv.conf (this machine's) does not know it: with no
// upstreamResolver in runtime.json the proxy resolves through the
// container's own servers, on the default bridge (the container's
// resolv.conf names the --dns server) and on a user-defined network
// (Docker's embedded 127.0.0.11, which forwards to it).
func TestDockerResolvesWithContainerDNS(t *testing.T) {
	d := newDockerEnv(t)
	d.net.AddHost(splitName, splitAddr4, splitAddr6)
	d.net.AnswerOnlyAt(splitName, d.net.DNS)
	cfg := d.runtime
	cfg.UpstreamResolver = ""
	d.writeRuntimeConfig(t, cfg)
	labels := []string{"--label", hook.AnnotationMode + "=allowlist", "--label", hook.AnnotationAllowedHosts + "=" + splitName}

	check := func(t *testing.T, id string, resolvers []netip.Addr) {
		t.Helper()
		s := d.state(id)
		if !slices.Equal(s.Resolvers, resolvers) {
			t.Errorf("resolvers %v, want %v", s.Resolvers, resolvers)
		}
		if want := addrPortsOf(d.net.DNS); !slices.Equal(s.ProxyResolvers, want) {
			t.Errorf("proxy resolvers %v, want the container's --dns %v", s.ProxyResolvers, want)
		}
		rogue := d.net.QueriesAt(d.net.RogueDNS, splitName)
		if r := d.probe(id, "get", "https://"+splitName+"/", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+splitName+" ") {
			t.Errorf("HTTPS to %s, which only the --dns server knows: %v", splitName, r)
		}
		if d.net.QueriesAt(d.net.RogueDNS, splitName) != rogue {
			t.Errorf("the rogue DNS server was asked for %s", splitName)
		}
		waitLogDecision(t, s.LogFile, decided(splitName, "allow"))
		d.mustDocker("rm", "--force", id)
		waitGone(t, s.PID)
	}

	t.Run("default bridge", func(t *testing.T) {
		id := d.startProbe("dm-dnsview-"+d.id, labels...)
		check(t, id, []netip.Addr{d.net.DNS})
	})

	t.Run("user-defined network, embedded DNS", func(t *testing.T) {
		network := "dm-dnsnet-" + d.id
		d.mustDocker("network", "create", "--subnet", dockerUserNet4.String(), "--gateway", dockerUserGw4.String(),
			"--opt", "com.docker.network.bridge.name=dmdv"+d.id, network)
		t.Cleanup(func() { d.docker("network", "rm", network) })
		id := d.startProbe("dm-dnsview-user-"+d.id, append([]string{"--network", network}, labels...)...)
		check(t, id, []netip.Addr{netip.MustParseAddr("127.0.0.11"), d.net.DNS})
	})
}

package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// TestDocker runs Debian's Docker 20.10 with doorman's runc wrapper as its
// default runtime: dockerd, containerd, the wrapper, the OCI hook and the
// proxies it starts all live in the root namespace, which reaches the fake
// internet through the test's link (see docker_link_test.go). It checks
// the per-container policy from labels (allowed and denied HTTPS and HTTP,
// denied names refused by the DNS filter, decision log, recorded state and
// label), the host-side layer on the container's veth, the daemon-wide
// default policy, the DOORMAN_* environment, Docker's embedded DNS on a
// user-defined network, the opt-out of both layers in runtime.json, that
// `docker rm -f` leaves nothing, and that a bad label stops `docker run`
// with doorman's own message.
func TestDocker(t *testing.T) {
	begin := time.Now()
	d := newDockerEnv(t)
	t.Logf("setup (fake internet, link, dockerd, probe image): %v", time.Since(begin).Round(time.Millisecond))
	labels := []string{"--label", hook.AnnotationMode + "=allowlist", "--label", hook.AnnotationAllowedHosts + "=" + apiName}

	t.Run("labels", func(t *testing.T) {
		step := time.Now()
		name := "dm-labels-" + d.id
		id := d.startProbe(name, labels...)
		s := d.state(id)
		if s.ID != id || s.Name != name || s.Runtime != "hook" || s.Mode != "allowlist" {
			t.Errorf("doorman recorded id %q name %q runtime %q mode %q; want %q %q hook allowlist", s.ID, s.Name, s.Runtime, s.Mode, id, name)
		}
		// Docker gives containers CAP_NET_RAW: rules inside the sandbox
		// alone do not hold against AF_PACKET, but the host-side layer on
		// the container's veth (installed when the hook runs again after
		// libnetwork-setkey) does, and the DNS filter is on: full.
		if s.Label != "full" || !s.HostLayer || !s.DNSFilter || s.BaseLabel != "partial (container holds CAP_NET_RAW)" {
			t.Errorf("label %q (base %q, host layer %v, DNS filter %v), want full (base partial (container holds CAP_NET_RAW), both layers)",
				s.Label, s.BaseLabel, s.HostLayer, s.DNSFilter)
		}
		if !hostLayerHolds(t, procNetNS(os.Getpid()), s.Key) {
			t.Errorf("no host-side layer chain for %s in the root namespace (dockerd's)", s.Key)
		}
		if want := []netip.Addr{d.net.DNS}; !slices.Equal(s.Resolvers, want) {
			t.Errorf("resolvers %v, want the container's --dns %v", s.Resolvers, want)
		}
		if pids := proxiesFor(id); !slices.Equal(pids, []int{s.PID}) {
			t.Errorf("proxy processes for %s: %v, want the recorded pid %d", id, pids, s.PID)
		}
		pid := d.pid(id)
		if ok, err := enforce.Present(procNetNS(pid)); err != nil || !ok {
			t.Errorf("doorman's table in the container's namespace: %v, %v", ok, err)
		}
		// The wrapper sets the environment at create time, before the veth
		// (and so the host-side layer) exists: it counts only the DNS
		// filter.
		assertDoormanEnv(t, processEnv(t, pid), "allowlist", "partial (container holds CAP_NET_RAW)", "the container's init")
		assertDoormanEnv(t, d.containerEnv(id), "allowlist", "partial (container holds CAP_NET_RAW)", "docker exec env")

		// HTTPS and HTTP by name (resolved through the DNS filter and
		// the fake internet's DNS server, the container's --dns): allowed.
		// A denied name does not resolve: the filter refuses it, and
		// logs it.
		if r := d.probe(id, "get", "https://"+apiName+"/docker", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS: %v", r)
		}
		if r := d.probe(id, "get", "http://"+apiName+"/docker"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTP: %v", r)
		}
		evilQueries := d.net.QueriesFor(evilName)
		assertLookupRefused(t, func(args ...string) dockerResult { return d.probe(id, args...) }, d.net.DNS, evilName)
		d.waitDNSDecision(t, s.LogFile, evilName, "deny")
		if n := d.net.QueriesFor(evilName) - evilQueries; n != 0 {
			t.Errorf("the fake internet's DNS server saw %d queries for the denied %s", n, evilName)
		}
		// Denied HTTPS and HTTP, connecting to evil's address.
		if r := d.probe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, d.resolveTo(d.evil)...)...); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS: want the probe's exit 3 with a TLS access_denied alert, got %v", r)
		}
		if r := d.probe(id, append([]string{"get", "http://" + evilName + "/"}, d.resolveTo(d.evil)...)...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") ||
			!strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, id) {
			t.Errorf("denied HTTP: want a 403 naming %s and %s, got %v", evilName, id, r)
		}
		// An allowed name sent to evil's address reaches the allowed host.
		if r := d.probe(id, "get", "https://"+apiName+"/spoof", "--ca", "/ca.pem", "--resolve", apiName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed name at evil's address: %v", r)
		}
		if n := webTraffic(d.evil); n != 0 {
			t.Errorf("evil saw %d requests or connections", n)
		}
		// Other TCP and UDP to evil, and DNS to the rogue server: nothing
		// arrives.
		if r := d.probe(id, "tcp", netip.AddrPortFrom(evilAddr4, testnet.PortRecorder).String(), "--send", "hello\r\n", "--timeout", "2s"); r.exit == 0 {
			t.Errorf("TCP to a recorder port of %s: want no reply, got %v", evilName, r)
		}
		if r := d.probe(id, "udp", netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho).String()); r.exit == 0 {
			t.Errorf("UDP to %s: want no answer, got %v", evilName, r)
		}
		if r := d.probe(id, "dns", d.net.RogueDNS.String(), apiName); r.exit == 0 {
			t.Errorf("DNS to the rogue server: want no answer, got %v", r)
		}
		if n := d.evil.Received(testnet.PortRecorder) + d.evil.UDPDatagrams(testnet.PortUDPEcho) + d.net.QueriesSeen(d.net.RogueDNS); n != 0 {
			t.Errorf("%d bytes, datagrams or queries reached evil or the rogue DNS server", n)
		}
		waitLogDecision(t, s.LogFile, decided(apiName, "allow"))
		waitLogDecision(t, s.LogFile, decided(evilName, "deny"))
		if want := filepath.Join(d.logDir, id+".log"); s.LogFile != want {
			t.Errorf("decision log %s, want %s", s.LogFile, want)
		}
		t.Logf("run and checks: %v", time.Since(step).Round(time.Millisecond))

		// docker rm -f: no proxy, no state, and the namespace (with the
		// table in it) is gone; the decision log stays as the record.
		step = time.Now()
		ino := netnsInode(t, pid)
		d.mustDocker("rm", "--force", id)
		waitGone(t, s.PID)
		if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
			t.Errorf("state %s left after docker rm -f: %v", s.Dir, err)
		}
		if pids := proxiesFor(id); len(pids) > 0 {
			t.Errorf("proxies of %s left after docker rm -f: %v", id, pids)
		}
		if netnsHeld(ino) {
			t.Errorf("the container's network namespace (inode %d) is still held after docker rm -f", ino)
		}
		if _, err := os.Stat(s.LogFile); err != nil {
			t.Errorf("the decision log should outlive the container: %v", err)
		}
		t.Logf("docker rm -f: %v", time.Since(step).Round(time.Millisecond))
	})

	t.Run("full label without CAP_NET_RAW", func(t *testing.T) {
		id := d.startProbe("dm-full-"+d.id, append([]string{"--cap-drop", "NET_RAW"}, labels...)...)
		s := d.state(id)
		if s.Label != "full" || s.BaseLabel != "full" {
			t.Errorf("label %q (base %q), want full", s.Label, s.BaseLabel)
		}
		// The DNS filter alone makes the create-time label full here.
		assertDoormanEnv(t, processEnv(t, d.pid(id)), "allowlist", "full", "the container's init")
		if r := d.probe(id, "get", "https://"+apiName+"/full", "--ca", "/ca.pem"); r.exit != 0 {
			t.Errorf("allowed HTTPS: %v", r)
		}
		d.mustDocker("rm", "--force", id)
		waitGone(t, s.PID)
	})

	t.Run("default policy", func(t *testing.T) {
		// No doorman label: the daemon-wide default policy (runtime.json's
		// defaultPolicy) allows other.example.test only.
		id := d.startProbe("dm-default-" + d.id)
		s := d.state(id)
		if s.Mode != "allowlist" {
			t.Errorf("mode %q, want the default policy's allowlist", s.Mode)
		}
		policy, err := os.ReadFile(s.PolicyPath())
		if err != nil || !strings.Contains(string(policy), otherName) || strings.Contains(string(policy), apiName) {
			t.Errorf("the sandbox's policy file: %q, %v; want the default policy's", policy, err)
		}
		if s.Label != "full" {
			t.Errorf("label %q, want full", s.Label)
		}
		assertDoormanEnv(t, processEnv(t, d.pid(id)), "allowlist", "partial (container holds CAP_NET_RAW)", "the container's init")
		if r := d.probe(id, "get", "https://"+otherName+"/default", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+otherName+" ") {
			t.Errorf("HTTPS to %s, allowed by the default policy: %v", otherName, r)
		}
		if r := d.probe(id, append([]string{"get", "https://" + apiName + "/", "--ca", "/ca.pem"}, d.resolveTo(d.api)...)...); r.exit != 3 {
			t.Errorf("HTTPS to %s, not in the default policy: want exit 3, got %v", apiName, r)
		}
		waitLogDecision(t, s.LogFile, decided(otherName, "allow"))
		waitLogDecision(t, s.LogFile, decided(apiName, "deny"))
		d.mustDocker("rm", "--force", id)
		waitGone(t, s.PID)
	})

	t.Run("user-defined network and embedded DNS", func(t *testing.T) {
		network := "dm-net-" + d.id
		d.mustDocker("network", "create", "--subnet", dockerUserNet4.String(), "--gateway", dockerUserGw4.String(),
			"--opt", "com.docker.network.bridge.name=dmdu"+d.id, network)
		t.Cleanup(func() { d.docker("network", "rm", network) })
		peerName := "dm-peer-" + d.id
		peer := d.startProbe(peerName, append([]string{"--network", network}, labels...)...)
		id := d.startProbe("dm-user-"+d.id, append([]string{"--network", network}, labels...)...)
		s := d.state(id)
		// Docker's resolver answers at 127.0.0.11 and forwards from inside
		// the container's namespace to the container's --dns server.
		if want := []netip.Addr{netip.MustParseAddr("127.0.0.11"), d.net.DNS}; !slices.Equal(s.Resolvers, want) {
			t.Errorf("resolvers %v, want %v", s.Resolvers, want)
		}
		peerAddr := d.mustDocker("inspect", "--format", "{{(index .NetworkSettings.Networks \""+network+"\").IPAddress}}", peer)
		if r := d.probe(id, "dns", "127.0.0.11", peerName); r.exit != 0 || !strings.Contains(r.stdout, "rcode: NOERROR") || !strings.Contains(r.stdout, peerAddr) {
			t.Errorf("the embedded DNS for the peer container %s (%s): %v", peerName, peerAddr, r)
		}
		before := d.net.QueriesFor(apiName)
		if r := d.probe(id, "dns", "127.0.0.11", apiName); r.exit != 0 || !strings.Contains(r.stdout, apiAddr4.String()) {
			t.Errorf("the embedded DNS for %s (forwarded to %v): %v", apiName, d.net.DNS, r)
		}
		if d.net.QueriesFor(apiName) == before {
			t.Errorf("the fake internet's DNS server saw no query for %s", apiName)
		}
		if r := d.probe(id, "get", "https://"+apiName+"/usernet", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS on the user-defined network: %v", r)
		}
		if layer := hostLayerHolds(t, procNetNS(os.Getpid()), s.Key); s.Label != "full" || !layer {
			t.Errorf("label %q on the user-defined network (host-side layer in the root namespace: %v), want full with the layer", s.Label, layer)
		}
		if r := d.probe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, d.resolveTo(d.evil)...)...); r.exit != 3 {
			t.Errorf("denied HTTPS on the user-defined network: want exit 3, got %v", r)
		}
		waitLogDecision(t, s.LogFile, decided(apiName, "allow"))
		waitLogDecision(t, s.LogFile, decided(evilName, "deny"))
		d.mustDocker("rm", "--force", id, peer)
		waitGone(t, s.PID)
	})

	t.Run("neighbours on one network", func(t *testing.T) {
		// Two containers on the default bridge, their ports isolated by
		// the host-side layer: the one whose policy names the other's
		// address reaches it through its proxy, the other is refused.
		peer := d.startProbe("dm-nbr-"+d.id, labels...)
		peerAddr := netip.MustParseAddr(d.mustDocker("inspect", "--format", "{{.NetworkSettings.IPAddress}}", peer))
		srv := d.net.ServeHost(t, testnet.OpenNetns(t, procNetNS(d.pid(peer))), "peer.docker.internal", peerAddr)
		allowed := d.startProbe("dm-nbr-allowed-"+d.id, "--label", hook.AnnotationMode+"=allowlist",
			"--label", hook.AnnotationAllowedHosts+"="+apiName+","+peerAddr.String())
		other := d.startProbe("dm-nbr-other-"+d.id, labels...)
		url := "http://" + peerAddr.String() + "/neighbour"
		if r := d.probe(allowed, "get", url); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\npeer.docker.internal ") {
			t.Errorf("HTTP to the neighbour at %s, an address the policy names: %v", peerAddr, r)
		}
		if r := d.probe(other, "get", url); !strings.HasPrefix(r.stdout, "status: 403\n") {
			t.Errorf("HTTP to the neighbour at %s from a container whose policy does not name it: %v, want a 403", peerAddr, r)
		}
		if n := srv.RequestsFor(peerAddr.String()); n != 1 {
			t.Errorf("the neighbour served %d requests by address, want 1", n)
		}
		for _, id := range []string{peer, allowed, other} {
			if s := d.state(id); !hostPortIsolated(t, s) {
				t.Errorf("the bridge port of %s (%v) is not isolated", id, s.HostIfaces)
			}
		}
		d.mustDocker("rm", "--force", peer, allowed, other)
	})

	t.Run("opt-out of the DNS filter and the host-side layer", func(t *testing.T) {
		// runtime.json with "dnsFilter": false, "hostLayer": false: the
		// sandbox has its in-namespace rules only, and its label names
		// both gaps, at create time and after.
		d.optOut(t)
		id := d.startProbe("dm-optout-"+d.id, labels...)
		s := d.state(id)
		const want = "partial (container holds CAP_NET_RAW; DNS to the resolvers is not filtered)"
		if s.Label != want || s.HostLayer || s.DNSFilter {
			t.Errorf("label %q (host layer %v, DNS filter %v), want %q without either layer", s.Label, s.HostLayer, s.DNSFilter, want)
		}
		assertDoormanEnv(t, processEnv(t, d.pid(id)), "allowlist", want, "the container's init")
		if hostLayerHolds(t, procNetNS(os.Getpid()), s.Key) {
			t.Errorf("a host-side layer chain for %s in the root namespace, though runtime.json turned it off", s.Key)
		}
		// The denied name resolves (nothing filters DNS); the proxy still
		// refuses the connection.
		if r := d.probe(id, "dns", d.net.DNS.String(), evilName); r.exit != 0 || !strings.Contains(r.stdout, evilAddr4.String()) {
			t.Errorf("DNS for %s without the filter: want its address, got %v", evilName, r)
		}
		if r := d.probe(id, "get", "https://"+evilName+"/", "--ca", "/ca.pem"); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS by name without the filter: want exit 3 (access_denied), got %v", r)
		}
		if r := d.probe(id, "get", "https://"+apiName+"/optout", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS without the filter: %v", r)
		}
		waitLogDecision(t, s.LogFile, decided(evilName, "deny"))
		if n := countDNSDecisions(s.LogFile, "", ""); n != 0 {
			t.Errorf("%d DNS filter lines in the log of a sandbox without the filter", n)
		}
		d.mustDocker("rm", "--force", id)
		waitGone(t, s.PID)
	})

	t.Run("request rules", func(t *testing.T) {
		// The wrapper's own CA directory and the fake internet's root as
		// the roots inspected hosts are verified against (runtime.json's
		// caDir and upstreamCAFile, passed on to the hook).
		cfg := d.runtime
		cfg.CADir = t.TempDir()
		cfg.UpstreamCAFile = d.net.WriteCA(t.TempDir())
		d.writeRuntimeConfig(t, cfg)
		t.Cleanup(func() { d.writeRuntimeConfig(t, d.runtime) })
		rules := `{"` + apiName + `": {"deny": [{"path": "/denied/*"}]}}`
		id := d.startProbe("dm-inspect-"+d.id, append(slices.Clone(labels), "--label", hook.AnnotationInspect+"="+rules)...)
		env := d.containerEnv(id)
		for _, k := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"} {
			if env[k] != "/etc/ssl/certs/ca-certificates.crt" {
				t.Errorf("%s=%q in the container, want the trust bundle /etc/ssl/certs/ca-certificates.crt", k, env[k])
			}
		}
		if r := d.mustDocker("exec", id, "sh", "-c", "echo x > /etc/ssl/certs/ca-certificates.crt && echo writable || echo read-only"); !strings.Contains(r, "read-only") {
			t.Errorf("the trust bundle is writable in the container: %q", r)
		}
		// No --ca: the probe trusts what SSL_CERT_FILE names, the bundle
		// with the network's CA, which vouches for the inspected host.
		if r := d.probe(id, "get", "https://"+apiName+"/allowed"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("inspected host, allowed path: %v", r)
		}
		if r := d.probe(id, "get", "https://"+apiName+"/denied/x"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") ||
			!strings.Contains(r.stdout, apiName) {
			t.Errorf("inspected host, denied path: %v, want doorman's 403 naming the host", r)
		}
		// One decision line per request (the session's connection line
		// comes when it ends).
		s := d.state(id)
		data, _ := os.ReadFile(s.LogFile)
		var allowed, denied bool
		for _, line := range strings.Split(string(data), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) != nil || l["msg"] != "request" {
				continue
			}
			allowed = allowed || l["path"] == "/allowed" && l["verdict"] == "allow"
			denied = denied || l["path"] == "/denied/x" && l["verdict"] == "deny"
		}
		if !allowed || !denied {
			t.Errorf("decision log: request lines allowed %v, denied %v, want both:\n%s", allowed, denied, data)
		}
		d.mustDocker("rm", "-f", id)
	})

	t.Run("rule sets", func(t *testing.T) { dockerRuleSets(t, d) })

	t.Run("bad labels", func(t *testing.T) {
		for _, tc := range []struct {
			label, value string
			want         []string // in docker run's error
		}{
			{hook.AnnotationAllowedHosts, "a*b.com", []string{hook.AnnotationAllowedHosts, `"a*b.com"`, "wildcard"}},
			{hook.AnnotationMode, "bogus", []string{hook.AnnotationMode, `"bogus"`, "allowlist"}},
		} {
			statesBefore, _ := sandbox.List(d.stateDir)
			name := "dm-bad-" + tc.value[:1] + d.id
			r := d.docker(slices.Concat([]string{"run", "--name", name, "--label", tc.label + "=" + tc.value}, d.runArgs(),
				[]string{dockerProbeImage, "/probe", "sleep", "1m"})...)
			if r.exit == 0 {
				t.Errorf("docker run with %s=%q: succeeded, want doorman to refuse it: %v", tc.label, tc.value, r)
			}
			for _, w := range append(tc.want, "doorman: container ") {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("docker run with %s=%q: error does not say %q: %v", tc.label, tc.value, w, r)
				}
			}
			id := regexp.MustCompile(`doorman: container ([0-9a-f]{64})`).FindStringSubmatch(r.stderr)
			if id == nil {
				continue
			}
			// Docker keeps its record of the container; no process of it
			// ever ran, and doorman made nothing for it.
			if st := d.mustDocker("inspect", "--format", "{{.State.Status}} {{.State.Pid}}", id[1]); st != "created 0" {
				t.Errorf("container refused by doorman: state %q, want \"created 0\"", st)
			}
			statesAfter, _ := sandbox.List(d.stateDir)
			if len(statesAfter) != len(statesBefore) {
				t.Errorf("doorman state after a refused container: %d sandboxes, before %d", len(statesAfter), len(statesBefore))
			}
			if _, err := os.Stat(filepath.Join(d.stateDir, id[1])); !os.IsNotExist(err) {
				t.Errorf("state of the refused container: %v", err)
			}
			if _, err := os.Stat(filepath.Join(d.logDir, id[1]+".log")); !os.IsNotExist(err) {
				t.Errorf("decision log of the refused container: %v", err)
			}
			if pids := proxiesFor(id[1]); len(pids) > 0 {
				t.Errorf("proxies of the refused container: %v", pids)
			}
			d.mustDocker("rm", "--force", id[1])
		}
	})
	t.Logf("total: %v", time.Since(begin).Round(time.Millisecond))
}

// assertDoormanEnv checks the DOORMAN_* variables the wrapper sets.
func assertDoormanEnv(t *testing.T, env map[string]string, mode, label, where string) {
	t.Helper()
	if env[hook.EnvNetworkMode] != mode || env[hook.EnvEnforcement] != label {
		t.Errorf("%s: %s=%q %s=%q, want %q and %q", where, hook.EnvNetworkMode, env[hook.EnvNetworkMode],
			hook.EnvEnforcement, env[hook.EnvEnforcement], mode, label)
	}
}

// webTraffic is what reached h by HTTP(S): requests, and
// connections to its web ports.
func webTraffic(h *testnet.Host) int {
	n := h.Requests()
	for _, p := range []int{testnet.PortHTTP, testnet.PortHTTPS} {
		n += h.Connections(p)
	}
	return n
}

// procNetNS is the path of process pid's network namespace.
func procNetNS(pid int) string { return "/proc/" + itoa(pid) + "/ns/net" }

package integration

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
)

// TestPodman runs real Podman 4 (Debian's, CNI backend) containers on a
// network whose conflist chains doorman after Debian's bridge plugin, and
// repeats the libcni tests' allowed/denied checks from inside them with the
// probe program. Podman, conmon, crun, the plugins and doorman's proxy all
// run in testnet's host namespace. It also checks what Podman passes
// doorman (container id and name, netns) and that `podman rm` and
// `podman run --rm` leave no state and no proxy behind.
func TestPodman(t *testing.T) {
	skipUnlessRoot(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skipf("podman is not installed (apt-get install podman containernetworking-plugins): %v", err)
	}
	begin := time.Now()
	e := newCNIEnv(t)
	p := newPodmanEnv(t, e)
	if v := p.mustPodman("version", "--format", "{{.Client.Version}}"); !strings.HasPrefix(v, "4.") {
		t.Fatalf("podman %s: this test drives Podman 4's CNI backend; Podman 5 has netavark only (use the hook there)", v)
	}
	t.Logf("setup (fake internet, probe build, image import): %v", time.Since(begin).Round(time.Millisecond))
	suffix := strings.TrimPrefix(e.net.HostNS().Name(), "dm-host-")

	// One long-running container; every check runs in it by podman exec.
	step := time.Now()
	name := "dm-probe-" + suffix
	id := p.mustPodman(slices.Concat([]string{"run", "--detach", "--name", name}, p.runArgs(),
		[]string{probeImage, "/probe", "sleep", "10m"})...)
	ctr := &container{key: id + "-eth0"}
	s := e.state(ctr)
	netns := p.mustPodman("inspect", "--format", "{{.NetworkSettings.SandboxKey}}", id)
	if s.ID != id || s.Name != name || s.Network != p.network || s.IfName != "eth0" || s.NetNS != netns {
		t.Fatalf("doorman recorded id %q name %q network %q ifname %q netns %q; podman has id %q name %q network %q netns %q",
			s.ID, s.Name, s.Network, s.IfName, s.NetNS, id, name, p.network, netns)
	}
	if pids := proxiesFor(id); !slices.Equal(pids, []int{s.PID}) {
		t.Fatalf("proxy processes for %s: %v, want the recorded pid %d", id, pids, s.PID)
	}
	// CNI does not know the container's capabilities, so the rules in its
	// namespace alone are partial; the host-side layer on the veth (on by
	// default, like the DNS filter) makes the label full.
	if !strings.HasPrefix(s.BaseLabel, "partial (") || !s.HostLayer || !s.DNSFilter || s.Label != "full" {
		t.Errorf("label %q (in-namespace %q), host-side layer %v, DNS filter %v; want full (partial), both layers",
			s.Label, s.BaseLabel, s.HostLayer, s.DNSFilter)
	}
	t.Logf("podman run --detach: %v", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	probe := func(args ...string) podmanResult {
		t.Helper()
		return p.podman(slices.Concat([]string{"exec", id, "/probe"}, args)...)
	}

	// HTTPS: allowed and denied (a TLS alert), by name (Go's client tries
	// the IPv6 address first) and at each address family's literal address.
	for _, via := range []netip.Addr{{}, apiAddr4, apiAddr6} {
		args := []string{"get", "https://" + apiName + "/podman", "--ca", "/ca.pem"}
		if via.IsValid() {
			args = append(args, "--resolve", apiName+":"+via.String())
		}
		if r := probe(args...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS (address %v): %v", via, r)
		}
	}
	// A denied name does not resolve: the DNS filter refuses it (Go
	// reports REFUSED as "server misbehaving"). At each of its addresses
	// it gets the TLS alert.
	if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem"); !probeFailed(r, 1) || !strings.Contains(r.stderr, "lookup "+evilName) || !strings.Contains(r.stderr, "server misbehaving") {
		t.Errorf("denied name: want the probe to fail resolving it, got %v", r)
	}
	for _, via := range []netip.Addr{evilAddr4, evilAddr6} {
		args := []string{"get", "https://" + evilName + "/", "--ca", "/ca.pem", "--resolve", evilName + ":" + via.String()}
		if r := probe(args...); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS (address %v): want the probe's exit 3 with a TLS access_denied alert, got %v", via, r)
		}
	}
	// HTTP: a 403 naming the host and the sandbox (the container id).
	if r := probe("get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") ||
		!strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, id) {
		t.Errorf("denied HTTP: want a 403 naming %s and %s, got %v", evilName, id, r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil host served %d requests", n)
	}

	// Other TCP to a host that is not allowed: nothing arrives.
	if r := probe("tcp", netip.AddrPortFrom(evilAddr4, testnet.PortRecorder).String(), "--send", "hello\r\n", "--timeout", "3s"); !probeFailed(r, 4, 5) {
		t.Errorf("TCP to a recorder port of %s: want no reply, got %v", evilName, r)
	}
	if n := e.evil.Received(testnet.PortRecorder); n != 0 {
		t.Errorf("evil received %d bytes on port %d", n, testnet.PortRecorder)
	}

	// UDP to anything but the resolvers: nothing arrives.
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho),
		netip.AddrPortFrom(apiAddr4, testnet.PortHTTPS), // QUIC's port of an allowed host
	} {
		if r := probe("udp", dst.String()); !probeFailed(r, 1, 4, 5) {
			t.Errorf("UDP to %v: want no answer, got %v", dst, r)
		}
	}
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho) + e.api.UDPDatagrams(testnet.PortHTTPS); n != 0 {
		t.Errorf("%d UDP datagrams arrived", n)
	}

	// DNS: the resolvers answer, the rogue server never sees a query.
	for _, srv := range []netip.Addr{e.net.DNS, e.net.DNS6} {
		if r := probe("dns", srv.String(), apiName); r.exit != 0 || !strings.Contains(r.stdout, "rcode: NOERROR") || !strings.Contains(r.stdout, apiAddr4.String()) {
			t.Errorf("DNS to the resolver %v: %v", srv, r)
		}
	}
	rogueBefore := e.net.QueriesSeen(e.net.RogueDNS) + e.net.QueriesSeen(e.net.RogueDNS6)
	for _, srv := range []netip.Addr{e.net.RogueDNS, e.net.RogueDNS6} {
		if r := probe("dns", srv.String(), apiName); !probeFailed(r, 1, 4, 5) {
			t.Errorf("DNS to %v, not a resolver: want no answer, got %v", srv, r)
		}
	}
	if n := e.net.QueriesSeen(e.net.RogueDNS) + e.net.QueriesSeen(e.net.RogueDNS6) - rogueBefore; n != 0 {
		t.Errorf("the rogue DNS server saw %d queries", n)
	}

	// The decision log, under the key <container id>-<ifname>.
	e.waitDecision(ctr, decided(apiName, "allow"))
	e.waitDecision(ctr, decided(evilName, "deny"))
	e.waitDNSDecision(ctr, evilName, "deny")
	t.Logf("checks by podman exec: %v", time.Since(step).Round(time.Millisecond))

	// podman network connect to a second network whose chain has doorman:
	// refused, and the container stays enforced as it was.
	step = time.Now()
	if err := os.WriteFile(filepath.Join(p.netDir, "dm-podman2.conflist"), bridgeConflist(t, e, "dm-podman2", lanB, true), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := p.podman("network", "connect", "dm-podman2", id); r.exit == 0 || !strings.Contains(r.stderr, "already enforced by doorman sandbox "+ctr.key) {
		t.Errorf("podman network connect to a second doorman network: %v, want doorman's refusal naming %s", r, ctr.key)
	}
	if s2 := e.state(ctr); s2.PID != s.PID || !s2.ProxyAlive() {
		t.Errorf("after the refused connect: proxy pid %d (alive %v), want %d", s2.PID, s2.ProxyAlive(), s.PID)
	}
	if r := probe("get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") {
		t.Errorf("denied HTTP after the refused connect: want a 403, got %v", r)
	}
	if r := probe("udp", netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho).String()); !probeFailed(r, 1, 4, 5) {
		t.Errorf("UDP after the refused connect: want no answer, got %v", r)
	}
	if n := e.evil.Requests() + e.evil.UDPDatagrams(testnet.PortUDPEcho); n != 0 {
		t.Errorf("evil host saw %d requests and datagrams", n)
	}
	t.Logf("podman network connect, refused: %v", time.Since(step).Round(time.Millisecond))

	// podman rm: the proxy, doorman's state and the netns all go.
	step = time.Now()
	p.mustPodman("rm", "--force", "--time", "0", id)
	waitGone(t, s.PID)
	assertSandboxGone(t, e, id)
	if _, err := os.Stat(netns); !os.IsNotExist(err) {
		t.Errorf("the container's netns %s is left after podman rm: %v", netns, err)
	}
	t.Logf("podman rm: %v", time.Since(step).Round(time.Millisecond))

	// podman run --rm, with a per-container policy file found by the name
	// Podman passes in CNI_ARGS (K8S_POD_NAME): it allows evil.
	step = time.Now()
	wide := "dm-wide-" + suffix
	if err := os.WriteFile(filepath.Join(e.policyDir, wide), []byte(evilName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cidFile := filepath.Join(t.TempDir(), "cid")
	r := p.podman(slices.Concat([]string{"run", "--rm", "--name", wide, "--cidfile", cidFile}, p.runArgs(),
		[]string{probeImage, "/probe", "get", "https://" + evilName + "/wide", "--ca", "/ca.pem"})...)
	if r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+evilName+" ") {
		t.Errorf("run --rm with a policy file named after the container allowing %s: %v", evilName, r)
	}
	data, err := os.ReadFile(cidFile)
	if err != nil {
		t.Fatalf("the container id of podman run --rm: %v", err)
	}
	wideID := strings.TrimSpace(string(data))
	e.waitDecision(&container{key: wideID + "-eth0"}, decided(evilName, "allow"))
	assertSandboxGone(t, e, wideID)
	t.Logf("podman run --rm: %v", time.Since(step).Round(time.Millisecond))
}

// probeFailed reports whether the probe itself ran and failed with one of
// the exit codes (rather than podman failing to run it).
func probeFailed(r podmanResult, codes ...int) bool {
	return strings.Contains(r.stderr, "probe: ") && slices.Contains(codes, r.exit)
}

// assertSandboxGone checks that container id has no state in doorman's
// state dir and no proxy process (waiting a little for a proxy to exit).
func assertSandboxGone(t *testing.T, e *cniEnv, id string) {
	t.Helper()
	key := id + "-eth0"
	if _, err := os.Stat(filepath.Join(e.stateDir, key)); !os.IsNotExist(err) {
		t.Errorf("state of %s left after its container was removed: %v", key, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := proxiesFor(id)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("proxy processes of %s left after its container was removed: %v", id, pids)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

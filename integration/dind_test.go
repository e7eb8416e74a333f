package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/sandbox"
)

// The label of a container that shares its daemon's namespace inside a
// doorman sandbox (hook.PrepareBundle).
const inheritedLabel = "inherited (the enclosing sandbox's rules)"

// TestDockerInDocker runs a Docker daemon inside a container that the
// test's dockerd starts through doorman (the outer sandbox: it may reach
// api.example.test and other.example.test), with doorman's wrapper as the
// inner daemon's default runtime too (the inner default policy allows
// api.example.test). It checks that each inner container gets its own
// proxy, policy, state and decision log (on the default bridge and on a
// user-defined network with Docker's embedded DNS), that an inner label
// cannot widen what the outer policy allows, that an inner container on the
// host network (the outer container's namespace) and one started without
// doorman (--runtime runc) get the outer policy, that denied names are
// refused by the DNS filter, that the inner containers' host-side layer
// lives in the outer container's namespace (the inner daemon's), that the
// inner runtime.json can opt out of both layers, and that every label says
// what its enforcement covers. The cases and their labels are logged as a
// table.
func TestDockerInDocker(t *testing.T) {
	begin := time.Now()
	d := newDockerEnv(t)
	e := newDinD(t, d, "--label", hook.AnnotationMode+"=allowlist",
		"--label", hook.AnnotationAllowedHosts+"="+apiName+","+otherName)
	t.Logf("setup (fake internet, link, dockerd, outer container, inner dockerd, images): %v", time.Since(begin).Round(time.Millisecond))

	var table []string
	record := func(c, network, label, policy string) {
		table = append(table, fmt.Sprintf("| %s | %s | %s | %s |", c, network, label, policy))
	}

	// The outer container holds CAP_NET_ADMIN (a Docker daemon needs it):
	// it could flush the rules in its own namespace, but not the
	// host-side layer on its veth in the root namespace (dockerd's).
	outer := d.state(e.outer)
	if outer.Label != "full" || !outer.HostLayer || outer.BaseLabel != "partial (container holds CAP_NET_ADMIN)" {
		t.Errorf("outer label %q (base %q, host layer %v), want full (base partial (container holds CAP_NET_ADMIN), host layer)",
			outer.Label, outer.BaseLabel, outer.HostLayer)
	}
	if !hostLayerHolds(t, procNetNS(os.Getpid()), outer.Key) {
		t.Errorf("no host-side layer chain for the outer container in the root namespace")
	}
	// The environment is set at create time, before the veth exists.
	assertDoormanEnv(t, processEnv(t, e.outerPID), "allowlist", "partial (container holds CAP_NET_ADMIN)", "the outer container's init")
	record("outer (DinD) container", "test dockerd's bridge", outer.Label, "outer labels: "+apiName+", "+otherName)
	outerDecisions := func(name, verdict string) int { return countDecisions(outer.LogFile, decided(name, verdict)) }

	t.Run("inner default bridge", func(t *testing.T) {
		id := e.startInnerProbe("dm-bridge", "--cap-drop", "NET_RAW",
			"--label", hook.AnnotationAllowedHosts+"="+apiName)
		s := e.assertInnerSandbox(t, id, "allowlist", "full", "full")
		record("inner, --cap-drop NET_RAW", "inner default bridge", s.Label, "inner label: "+apiName)
		outerAllowed := outerDecisions(apiName, "allow")
		if r := e.innerProbe(id, "get", "https://"+apiName+"/inner", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS from an inner container: %v", r)
		}
		// The denied name does not resolve: the inner filter refuses it.
		assertLookupRefused(t, func(args ...string) dockerResult { return e.innerProbe(id, args...) }, d.net.DNS, evilName)
		d.waitDNSDecision(t, e.innerLog(id), evilName, "deny")
		// By address, the inner proxy refuses it.
		if r := e.innerProbe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, e.resolveTo(d.evil)...)...); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS from an inner container: want exit 3 (access_denied), got %v", r)
		}
		if r := e.innerProbe(id, append([]string{"get", "http://" + evilName + "/"}, e.resolveTo(d.evil)...)...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, id) {
			t.Errorf("denied HTTP from an inner container: want a 403 naming the inner container %s, got %v", id, r)
		}
		// Both layers decided on the allowed connection: the inner proxy's
		// upstream connection went through the outer sandbox's proxy.
		waitLogDecision(t, e.innerLog(id), decided(apiName, "allow"))
		waitLogDecision(t, e.innerLog(id), decided(evilName, "deny"))
		waitFor(t, "the outer proxy to log the inner container's allowed connection", func() bool {
			return outerDecisions(apiName, "allow") > outerAllowed
		})
		e.removeInnerContainer(t, id, s)
	})

	t.Run("inner user-defined network", func(t *testing.T) {
		network := "dm-inner-net"
		e.mustInner("network", "create", "--subnet", dindUserSubnet, "--gateway", dindUserGateway,
			"--opt", "com.docker.network.bridge.name=dmin0", network)
		id := e.startInnerProbe("dm-usernet", "--network", network,
			"--label", hook.AnnotationMode+"=allowlist", "--label", hook.AnnotationAllowedHosts+"="+apiName)
		s := e.assertInnerSandbox(t, id, "allowlist", "full", "partial (container holds CAP_NET_RAW)")
		record("inner", "inner user-defined network", s.Label, "inner label: "+apiName)
		if want := []netip.Addr{netip.MustParseAddr("127.0.0.11"), d.net.DNS}; !slices.Equal(s.Resolvers, want) {
			t.Errorf("resolvers %v, want %v", s.Resolvers, want)
		}
		if r := e.innerProbe(id, "dns", "127.0.0.11", apiName); r.exit != 0 || !strings.Contains(r.stdout, apiAddr4.String()) {
			t.Errorf("the inner embedded DNS for %s: %v", apiName, r)
		}
		if r := e.innerProbe(id, "get", "https://"+apiName+"/usernet", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS on the inner user-defined network: %v", r)
		}
		if r := e.innerProbe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, e.resolveTo(d.evil)...)...); r.exit != 3 {
			t.Errorf("denied HTTPS on the inner user-defined network: want exit 3, got %v", r)
		}
		waitLogDecision(t, e.innerLog(id), decided(apiName, "allow"))
		waitLogDecision(t, e.innerLog(id), decided(evilName, "deny"))
		e.removeInnerContainer(t, id, s)
		e.mustInner("network", "rm", network)
	})

	t.Run("inner label cannot widen the outer policy", func(t *testing.T) {
		id := e.startInnerProbe("dm-widen", "--label", hook.AnnotationAllowedHosts+"="+evilName)
		s := e.assertInnerSandbox(t, id, "allowlist", "full", "partial (container holds CAP_NET_RAW)")
		record("inner, label allows "+evilName, "inner default bridge", s.Label, "inner label: "+evilName+"; outer denies it")
		// The inner proxy admits the name, then dials it (it resolves
		// the name itself, from the outer container's namespace): the
		// outer sandbox's DNS filter refuses the lookup, so the inner proxy
		// has nowhere to connect, logs an error and resets the connection.
		// The outer policy holds before any packet leaves for evil.
		outerRefused := countDNSDecisions(outer.LogFile, evilName, "deny")
		if r := e.innerProbe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, e.resolveTo(d.evil)...)...); r.exit != 4 {
			t.Errorf("HTTPS to %s, allowed inside, denied outside: want exit 4 (reset by the inner proxy), got %v", evilName, r)
		}
		if r := e.innerProbe(id, append([]string{"get", "http://" + evilName + "/"}, e.resolveTo(d.evil)...)...); r.exit != 4 {
			t.Errorf("HTTP to %s, allowed inside, denied outside: want exit 4 (reset by the inner proxy), got %v", evilName, r)
		}
		line := waitLogDecision(t, e.innerLog(id), decided(evilName, "error"))
		if reason, _ := line["reason"].(string); !strings.Contains(reason, "resolve "+evilName) {
			t.Errorf("the inner proxy's line for %s: reason %q, want its failed lookup", evilName, reason)
		}
		if n := countDecisions(e.innerLog(id), decided(evilName, "allow")); n != 0 {
			t.Errorf("the inner proxy logged %d connections to %s as allowed (relayed)", n, evilName)
		}
		waitFor(t, "the outer DNS filter to refuse "+evilName, func() bool {
			return countDNSDecisions(outer.LogFile, evilName, "deny") > outerRefused
		})
		// The container's own lookup: the inner filter admits the name and
		// forwards it, the outer filter refuses it.
		assertLookupRefused(t, func(args ...string) dockerResult { return e.innerProbe(id, args...) }, d.net.DNS, evilName)
		d.waitDNSDecision(t, e.innerLog(id), evilName, "allow")
		if n := webTraffic(d.evil); n != 0 {
			t.Errorf("evil saw %d requests or connections", n)
		}
		e.removeInnerContainer(t, id, s)
	})

	t.Run("inner host network gets the outer policy", func(t *testing.T) {
		// No label: the inner default policy (api only) would apply to a
		// namespace of its own, but this container has none: it runs in
		// the outer sandbox's namespace, under the outer policy.
		id := e.startInnerProbe("dm-hostnet", "--network", "host")
		assertDoormanEnv(t, e.innerEnv(id), "allowlist", inheritedLabel, "docker exec env")
		if _, err := e.innerState(id); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the inner doorman made a sandbox for a host-network container: %v", err)
		}
		if pids := proxiesFor(id); len(pids) != 0 {
			t.Errorf("proxies for a host-network inner container: %v", pids)
		}
		record("inner, --network host", "the outer container's namespace", inheritedLabel, "outer policy")
		if r := e.innerProbe(id, "get", "https://"+otherName+"/hostnet", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+otherName+" ") {
			t.Errorf("HTTPS to %s (outer policy: allowed): %v", otherName, r)
		}
		if r := e.innerProbe(id, append([]string{"get", "http://" + evilName + "/"}, e.resolveTo(d.evil)...)...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, e.outer) {
			t.Errorf("HTTP to %s (outer policy: denied): want the outer sandbox's 403, got %v", evilName, r)
		}
		waitLogDecision(t, outer.LogFile, decided(otherName, "allow"))
		e.mustInner("rm", "--force", id)
	})

	t.Run("inner container without doorman gets the outer policy", func(t *testing.T) {
		// The nested-daemon rule: forwarded TCP of the outer sandbox goes
		// through its proxy, hook or no hook.
		id := e.startInnerProbe("dm-plain", "--runtime", "runc", "--label", hook.AnnotationAllowedHosts+"="+evilName)
		if env := e.innerEnv(id); env[hook.EnvEnforcement] != "" {
			t.Errorf("a container started without doorman has %s=%q", hook.EnvEnforcement, env[hook.EnvEnforcement])
		}
		if _, err := e.innerState(id); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("inner doorman state for a container started with runc: %v", err)
		}
		record("inner, --runtime runc (no inner hook)", "inner default bridge", "none (no "+hook.EnvEnforcement+")", "outer policy")
		outerOther := outerDecisions(otherName, "allow")
		if r := e.innerProbe(id, "get", "https://"+otherName+"/plain", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+otherName+" ") {
			t.Errorf("HTTPS to %s (outer policy: allowed): %v", otherName, r)
		}
		if r := e.innerProbe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, e.resolveTo(d.evil)...)...); r.exit != 3 {
			t.Errorf("HTTPS to %s (outer policy: denied): want exit 3, got %v", evilName, r)
		}
		waitFor(t, "the outer proxy to allow "+otherName, func() bool { return outerDecisions(otherName, "allow") > outerOther })
		e.mustInner("rm", "--force", id)
	})

	t.Run("inner opt-out of the DNS filter and the host-side layer", func(t *testing.T) {
		// The inner runtime.json with "dnsFilter": false, "hostLayer":
		// false: the inner sandbox has its in-namespace rules only, and
		// its label names both gaps. Its DNS still crosses the outer
		// sandbox, whose filter applies the outer policy.
		e.optOutInner(t)
		id := e.startInnerProbe("dm-optout", "--label", hook.AnnotationAllowedHosts+"="+apiName)
		const want = "partial (container holds CAP_NET_RAW; DNS to the resolvers is not filtered)"
		s := e.assertInnerSandbox(t, id, "allowlist", want, want)
		if s.HostLayer || s.DNSFilter {
			t.Errorf("inner sandbox with host layer %v, DNS filter %v; runtime.json turned both off", s.HostLayer, s.DNSFilter)
		}
		record("inner, inner runtime.json opts out", "inner default bridge", s.Label, "inner label: "+apiName)
		if r := e.innerProbe(id, "get", "https://"+apiName+"/optout", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS without the inner filter: %v", r)
		}
		if r := e.innerProbe(id, append([]string{"get", "https://" + evilName + "/", "--ca", "/ca.pem"}, e.resolveTo(d.evil)...)...); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS without the inner filter: want exit 3 (access_denied), got %v", r)
		}
		waitLogDecision(t, e.innerLog(id), decided(apiName, "allow"))
		waitLogDecision(t, e.innerLog(id), decided(evilName, "deny"))
		if n := countDNSDecisions(e.innerLog(id), "", ""); n != 0 {
			t.Errorf("%d DNS filter lines in the log of an inner sandbox without the filter", n)
		}
		e.removeInnerContainer(t, id, s)
	})

	if n := webTraffic(d.evil); n != 0 {
		t.Errorf("evil saw %d requests or connections", n)
	}
	t.Logf("cases and labels:\n| case | network | label | policy that applies |\n|---|---|---|---|\n%s", strings.Join(table, "\n"))
	t.Logf("total: %v", time.Since(begin).Round(time.Millisecond))
}

// assertInnerSandbox checks inner container id's sandbox: the inner
// doorman's state (mode, label), one proxy of its own (a process in the
// outer container, serving only this container), its host-side layer (if
// the state records one) in the outer container's namespace and not in the
// root namespace, and the DOORMAN_* environment, whose label (envLabel) is
// computed at create time, before the host-side layer. It returns the
// state.
func (e *dindEnv) assertInnerSandbox(t *testing.T, id, mode, label, envLabel string) *sandbox.State {
	t.Helper()
	s, err := e.innerState(id)
	if err != nil {
		t.Fatalf("inner doorman state of %s: %v", id, err)
	}
	if s.ID != id || s.Runtime != "hook" || string(s.Mode) != mode || s.Label != label {
		t.Errorf("inner state: id %q runtime %q mode %q label %q; want %q hook %q %q", s.ID, s.Runtime, s.Mode, s.Label, id, mode, label)
	}
	pids := proxiesFor(id)
	if len(pids) != 1 || nsPID(pids[0]) != s.PID {
		t.Errorf("proxies for inner container %s: host pids %v, want one whose pid in the outer container is the recorded %d", id, pids, s.PID)
	}
	if inOuter := hostLayerHolds(t, e.outerNetNS(), s.Key); inOuter != s.HostLayer {
		t.Errorf("inner sandbox %s: host-side layer recorded %v, its chain in the outer container's namespace %v", id, s.HostLayer, inOuter)
	}
	if hostLayerHolds(t, procNetNS(os.Getpid()), s.Key) {
		t.Errorf("inner sandbox %s: a host-side layer chain in the root namespace, not the inner daemon's", id)
	}
	assertDoormanEnv(t, e.innerEnv(id), mode, envLabel, "docker exec env")
	return s
}

// removeInnerContainer removes inner container id and checks that its
// proxy and state went with it.
func (e *dindEnv) removeInnerContainer(t *testing.T, id string, s *sandbox.State) {
	t.Helper()
	pids := proxiesFor(id)
	e.mustInner("rm", "--force", id)
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if _, err := e.innerState(id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("inner state of %s after docker rm -f: %v", id, err)
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

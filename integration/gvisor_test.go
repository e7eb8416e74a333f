package integration

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/internal/runtimekind"
)

// TestGVisorCNI runs a runsc container (gVisor's own network stack on
// the container's veth, which no IP hook of its namespace sees) on a
// netns that the CNI chain bridge + doorman wired with doorman's
// defaults. The host-side layer redirects its TCP to its proxy and its
// DNS to the DNS filter, so it gets the same decisions as a runc
// container: the allowed name is relayed, a denied name does not
// resolve, a denied name by address gets the TLS alert, UDP to anywhere
// else arrives nowhere, and every decision is in its log. Its label is
// full, and doorman tells its kind (runsc).
func TestGVisorCNI(t *testing.T) {
	r := newRunscEnv(t)
	c := r.cniEnv.newContainer()
	r.mustAdd(c, r.conflist(map[string]any{"allowedHosts": []string{apiName}}))
	st := r.cniEnv.state(c)
	if st.Label != "full" || st.HostPort4 == 0 {
		t.Fatalf("label %q, host-side listener port %d: want full and a port", st.Label, st.HostPort4)
	}
	g := r.newContainer("gv", withNetNS(c.ns.Path()), withoutHooks(), withNoCgroup())
	r.runDetached(g)
	gvisorRows(t, r, g, func(pred func(map[string]any) bool) map[string]any { return r.waitDecision(c, pred) },
		func(name, verdict string) { r.waitDNSDecision(c, name, verdict) })
	st = r.cniEnv.state(c)
	st.DetectRuntimeKind()
	if st.RuntimeKind != string(runtimekind.Runsc) || st.Label != "full" {
		t.Errorf("detected kind %q, label %q: want runsc, full", st.RuntimeKind, st.Label)
	}
}

// TestGVisorHook runs a runsc container with doorman's OCI hooks in its
// config.json (runsc runs createRuntime hooks in `runsc create`, with the
// sandbox's pid, whose namespace is the container's) on a namespace wired
// to the host's bridge: the hook enforces it, and its label and kind say
// runsc; the same rows hold.
func TestGVisorHook(t *testing.T) {
	r := newRunscEnv(t)
	sbx := r.net.NewSandbox(t)
	g := r.newContainer("gvh", withNetNS(sbx.Path()), allowAPI(), withNoCgroup())
	r.runDetached(g)
	st := r.state(g)
	if st.Label != "full" || st.RuntimeKind != string(runtimekind.Runsc) || st.HostPort4 == 0 {
		t.Fatalf("label %q, kind %q, host-side port %d: want full, runsc and a port", st.Label, st.RuntimeKind, st.HostPort4)
	}
	gvisorRows(t, r, g, func(pred func(map[string]any) bool) map[string]any { return r.waitDecision(g.ctr(), pred) },
		func(name, verdict string) { r.waitDNSDecision(g.ctr(), name, verdict) })
}

// gvisorRows are the allow and deny rows every gVisor test checks in
// container g, whose policy allows apiName only.
func gvisorRows(t *testing.T, r *runcEnv, g *runcContainer, decision func(func(map[string]any) bool) map[string]any, dnsDecision func(name, verdict string)) {
	t.Helper()
	if res := r.exec(g, "/probe", "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--timeout", "10s"); res.exit != 0 || !strings.HasPrefix(res.stdout, "status: 200") {
		if os.Getenv("DOORMAN_DEBUG_GVISOR") != "" {
			t.Log(r.exec(g, "/probe", "dns", r.net.DNS.String(), apiName, "--timeout", "3s"))
			t.Log(r.exec(g, "/probe", "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--resolve="+apiName+":"+apiAddr4.String(), "--timeout", "3s"))
			out, _ := r.net.HostCommand(context.Background(), "nft", "list", "ruleset").CombinedOutput()
			t.Log(string(out))
			out, _ = r.net.HostCommand(context.Background(), "sh", "-c", "cat /proc/net/nf_conntrack; ip addr; ss -ltnu").CombinedOutput()
			t.Log(string(out))
		}
		t.Fatalf("allowed HTTPS from gVisor: %v", res)
	}
	decision(decided(apiName, "allow"))
	if res := r.exec(g, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--timeout", "5s"); !probeRan(res, 1) || !strings.Contains(res.stderr, "lookup "+evilName) {
		t.Errorf("denied name from gVisor: want it not to resolve, got %v", res)
	}
	dnsDecision(evilName, "deny")
	evilAt := "--resolve=" + evilName + ":" + evilAddr4.String()
	if res := r.exec(g, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem", evilAt, "--timeout", "5s"); res.exit != 3 {
		t.Errorf("denied HTTPS by address from gVisor: want the TLS alert (exit 3), got %v", res)
	}
	decision(decided(evilName, "deny"))
	before := r.evil.UDPDatagrams(testnet.PortUDPEcho)
	if res := r.exec(g, "/probe", "udp", evilAddr4.String()+":"+itoa(testnet.PortUDPEcho), "--send", "x", "--timeout", "2s"); res.exit == 0 {
		t.Errorf("UDP from gVisor got an answer: %v", res)
	}
	if n := r.evil.UDPDatagrams(testnet.PortUDPEcho); n != before {
		t.Errorf("UDP from gVisor reached the fake internet (%d datagrams)", n-before)
	}
}

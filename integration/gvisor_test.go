package integration

import (
	"context"
	"net/netip"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/containernetworking/cni/libcni"
	"os"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/hook"
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
	// The proxy's host-side listener serves the sandbox's redirected
	// connections only: the runtime's own processes (and its LAN) get
	// nowhere when they dial it straight.
	if err := tcpSendRecv(r.net.HostNS(), netip.AddrPortFrom(netip.MustParseAddr("198.51.100.129"), st.HostPort4), "GET / HTTP/1.0\r\nHost: "+apiName+"\r\n\r\n"); err == nil {
		t.Errorf("a connection straight to the proxy's host-side listener %d was answered", st.HostPort4)
	}
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
		if os.Getenv("DOORMAN_DEBUG_GVISOR") != "" { // what the runtime's namespace holds, for debugging
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

// previousGVisorRelease is main before the host-side redirect: it
// labelled a runsc sandbox full while none of its TCP reached the proxy.
const previousGVisorRelease = "8feb24a0848883375a1dac75813d736f8282143f"

// TestGVisorRowsFailOnThePreviousRelease runs a runsc container on a CNI
// netns enforced by the doorman of previousGVisorRelease and shows what
// TestGVisorCNI would have measured there: with the defaults the label
// says full while the allowed request gets nowhere (the host-side layer
// drops the TCP that no rule redirected: the label lies about a sandbox
// with no network); with the host-side layer off a denied host is
// reached straight from gVisor, under a label that blames only
// capabilities. Against this release the first is relayed (TestGVisorCNI)
// and the second is labelled for what it is (TestGVisorCNIWithoutHostLayer).
func TestGVisorRowsFailOnThePreviousRelease(t *testing.T) {
	pluginDir := buildPreviousDoorman(t, previousGVisorRelease)
	r := newRunscEnv(t)
	r.cniEnv.cni = libcni.NewCNIConfig([]string{pluginDir}, nil)

	c := r.cniEnv.newContainer()
	r.mustAdd(c, r.conflist(map[string]any{"allowedHosts": []string{apiName}}))
	g := r.newContainer("gvp", withNetNS(c.ns.Path()), withoutHooks(), withNoCgroup())
	r.runDetached(g)
	label := r.cniEnv.state(c).Label
	res := r.exec(g, "/probe", "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--resolve="+apiName+":"+apiAddr4.String(), "--timeout", "5s")
	if label != "full" || res.exit == 0 {
		t.Errorf("defaults: label %q, allowed request %v: want the label full and the request to get nowhere", label, res)
	} else {
		t.Logf("defaults against %s: label %q, the allowed request: %s", previousGVisorRelease[:7], label, strings.TrimSpace(res.stderr))
	}

	c2 := r.cniEnv.newContainer()
	r.mustAdd(c2, r.conflist(map[string]any{"allowedHosts": []string{apiName}, "hostLayer": false, "dnsFilter": false}))
	g2 := r.newContainer("gvp", withNetNS(c2.ns.Path()), withoutHooks(), withNoCgroup())
	r.runDetached(g2)
	label = r.cniEnv.state(c2).Label
	before := r.evil.Connections(testnet.PortHTTPS)
	res = r.exec(g2, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve="+evilName+":"+evilAddr4.String(), "--timeout", "5s")
	reached := r.evil.Connections(testnet.PortHTTPS) - before
	if reached == 0 || strings.Contains(label, "gVisor") {
		t.Errorf("host-side layer off: %d connections reached %s, label %q: want an escape under a label that does not name gVisor", reached, evilName, label)
	} else {
		t.Logf("host-side layer off against %s: %d connection(s) reached %s (probe exit %d), label %q", previousGVisorRelease[:7], reached, evilName, res.exit, label)
	}
}

// TestGVisorCNIWithoutHostLayer: a runsc sandbox whose host-side layer is
// off is enforced by nothing doorman can see, and its label says so once
// doorman sees gVisor in the namespace (the CNI plugin cannot tell the
// runtime at ADD, and says that too).
func TestGVisorCNIWithoutHostLayer(t *testing.T) {
	r := newRunscEnv(t)
	c := r.cniEnv.newContainer()
	r.mustAdd(c, r.conflist(map[string]any{"allowedHosts": []string{apiName}, "hostLayer": false}))
	if l := r.cniEnv.state(c).Label; !strings.Contains(l, "a runtime with a network stack of its own (gVisor, a microVM) sends past them") {
		t.Errorf("label at ADD %q: want it to say a runtime with its own stack sends past the rules", l)
	}
	g := r.newContainer("gvn", withNetNS(c.ns.Path()), withoutHooks(), withNoCgroup())
	r.runDetached(g)
	st := r.cniEnv.state(c)
	st.DetectRuntimeKind()
	if st.RuntimeKind != string(runtimekind.Runsc) || !strings.HasPrefix(st.Label, "partial (the workload runs on gVisor's network stack (runsc)") {
		t.Errorf("kind %q, label %q: want runsc, partial naming gVisor", st.RuntimeKind, st.Label)
	}
}

// TestDockerGVisor runs a container with `docker run --runtime
// doorman-runsc`: dockerd calls doorman's wrapper with
// --doorman-runtime=runsc (daemon.json runtimeArgs), the wrapper adds
// doorman's hooks and execs runsc as runtime.json names it, and the
// container's gVisor stack gets the same decisions as a runc one.
func TestDockerGVisor(t *testing.T) {
	runscDir(t)
	d := newDockerEnv(t)
	// runsc bind-mounts an empty network namespace of its own under its
	// root (dockerd's exec root) and leaves it when the container goes.
	t.Cleanup(func() {
		unix.Unmount(filepath.Join(d.execRoot, "runtime-runc", "moby", "null-netns"), unix.MNT_DETACH)
	})
	labels := []string{"--label", hook.AnnotationMode + "=allowlist", "--label", hook.AnnotationAllowedHosts + "=" + apiName}
	id := d.startProbe("dm-gvisor-"+d.id, append([]string{"--runtime", "doorman-runsc"}, labels...)...)
	s := d.state(id)
	if s.Label != "full" || s.RuntimeKind != string(runtimekind.Runsc) || !s.HostLayer || s.HostPort4 == 0 {
		t.Fatalf("label %q, kind %q, host layer %v, host-side port %d: want full, runsc, the layer and a port", s.Label, s.RuntimeKind, s.HostLayer, s.HostPort4)
	}
	if r := d.probe(id, "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--timeout", "10s"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200") {
		t.Fatalf("allowed HTTPS from gVisor under Docker: %v", r)
	}
	if r := d.probe(id, "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve="+evilName+":"+evilAddr4.String(), "--timeout", "5s"); r.exit != 3 {
		t.Errorf("denied HTTPS by address from gVisor under Docker: want the TLS alert (exit 3), got %v", r)
	}
	before := d.evil.UDPDatagrams(testnet.PortUDPEcho)
	d.probe(id, "udp", evilAddr4.String()+":"+itoa(testnet.PortUDPEcho), "--send", "x", "--timeout", "2s")
	if n := d.evil.UDPDatagrams(testnet.PortUDPEcho) - before; n != 0 {
		t.Errorf("UDP from gVisor under Docker reached the fake internet (%d datagrams)", n)
	}
	d.mustDocker("rm", "--force", id)
}

// TestCRIGVisor runs a pod with a runsc RuntimeClass handler through
// containerd's CRI (containerd 2, gVisor's shim containerd-shim-runsc-v1):
// the pod's sandbox joins the same CNI chain, doorman chained after the
// primary network, and its gVisor stack gets the same decisions.
func TestCRIGVisor(t *testing.T) {
	skipUnlessCRI(t)
	skipUnlessContainerd2(t)
	dir := runscDir(t)
	if _, err := os.Stat(filepath.Join(dir, "containerd-shim-runsc-v1")); err != nil {
		t.Fatalf("gVisor's containerd shim is not built (.ci/build-runsc builds it beside runsc): %v", err)
	}
	e := newCNIEnv(t)
	c := newCRIEnv(t, e, withCRIContainerd(criContainerd2Dir), withCRINetworks(criDefaultNetwork,
		criNetwork{handler: "runsc", name: "dm-cri-gv", lan: lanB, doorman: true, runsc: dir}))
	p := c.mustRunPod(criPodSpec{handler: "runsc", annotations: map[string]string{"doorman.io/allowed-hosts": apiName}})
	ctr := c.startProbe(p)
	// (Its kind is detected where the CLI runs, in the node's mount
	// namespace; the pod's netns path is the host session's own here.)
	if s := e.state(&container{key: p.key}); s.Label != "full" || s.HostPort4 == 0 {
		t.Errorf("label %q, host-side port %d: want full and a port", s.Label, s.HostPort4)
	}
	if r := c.probe(ctr, "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--timeout", "10s"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200") {
		t.Fatalf("allowed HTTPS from a gVisor pod: %v", r)
	}
	if r := c.probe(ctr, "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve="+evilName+":"+evilAddr4.String(), "--timeout", "5s"); r.exit != 3 {
		t.Errorf("denied HTTPS by address from a gVisor pod: want the TLS alert (exit 3), got %v", r)
	}
}

// TestGVisorHookRefusedWithoutHostLayer: with the host-side layer off,
// nothing doorman installs sees a runsc container's traffic, and the OCI
// hook refuses it (the container does not start) rather than enforce
// nothing under a label.
func TestGVisorHookRefusedWithoutHostLayer(t *testing.T) {
	r := newRunscEnv(t)
	sbx := r.net.NewSandbox(t)
	g := r.newContainer("gvoff", withNetNS(sbx.Path()), allowAPI(), withNoCgroup(), withHookFlags("--host-layer=false"))
	res := r.runc("run", "--detach", "--bundle", g.bundle, g.id)
	if res.exit == 0 || !strings.Contains(res.stdout+res.stderr, "gVisor") {
		t.Fatalf("runsc run with the host-side layer off: %v; want it refused, naming gVisor", res)
	}
	r.assertNoSandbox(g)
}

package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// TestPodmanHook runs real Podman 4 containers whose only enforcement is
// doorman's OCI hook, read by Podman from a hooks.d directory (the shipped
// hook/hooks.d files, pointed at the binary under test): the network is a
// plain bridge without doorman in its conflist, so CNI enforces nothing,
// which a container without doorman's annotation proves by reaching every
// host. A container with the annotations gets the hook: the libcni tests'
// allowed/denied checks hold from inside it; the hook records Podman's
// pre-created netns and the resolvers of the resolv.conf Podman
// bind-mounts; `podman stop` (poststop runs at the container's cleanup)
// leaves nothing, `podman start` enforces the new netns, and `podman rm`
// leaves nothing. A malformed annotation makes Podman refuse the container
// with doorman's message. A second pair of hooks, for containers marked
// otherwise, opts out of the DNS filter and the host-side layer: its
// container's label names what that leaves open.
func TestPodmanHook(t *testing.T) {
	skipUnlessRoot(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skipf("podman is not installed (apt-get install podman containernetworking-plugins): %v", err)
	}
	begin := time.Now()
	e := newCNIEnv(t)
	hooksDir := t.TempDir()
	writePodmanHooks(t, e, hooksDir)
	optOutPolicy := filepath.Join(t.TempDir(), "opt-out.policy")
	if err := os.WriteFile(optOutPolicy, []byte("mode: allowlist\n"+apiName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writePodmanOptOutHooks(t, e, hooksDir, optOutPolicy)
	p := newPodmanEnv(t, e, withoutDoormanCNI(), withHooksDir(hooksDir))
	if v := p.mustPodman("version", "--format", "{{.Client.Version}}"); !strings.HasPrefix(v, "4.") {
		t.Fatalf("podman %s: this test drives Podman 4 (CNI backend for the plain bridge network)", v)
	}
	suffix := strings.TrimPrefix(e.net.HostNS().Name(), "dm-host-")
	t.Logf("setup (fake internet, probe build, image import): %v", time.Since(begin).Round(time.Millisecond))

	// The container's only resolver is DNS6, given by --dns: Podman writes
	// it into the resolv.conf it bind-mounts over /etc/resolv.conf. The
	// image has no resolv.conf, and the host's (the Net's) lists DNS too:
	// resolvers of exactly [DNS6] can only come from Podman's file.
	runArgs := func(extra ...string) []string {
		return slices.Concat([]string{
			"--network", p.network, "--dns", e.net.DNS6.String(),
			"--cgroup-parent", p.cgroupParent, "--pull", "never",
		}, extra)
	}
	policy := []string{
		"--annotation", hook.AnnotationMode + "=allowlist",
		"--annotation", hook.AnnotationAllowedHosts + "=" + apiName,
	}

	step := time.Now()
	name := "dm-hook-" + suffix
	id := p.mustPodman(slices.Concat([]string{"run", "--detach", "--name", name}, runArgs(policy...),
		[]string{probeImage, "/probe", "sleep", "10m"})...)
	ctr := &container{key: hook.Key(id)}
	t.Logf("podman run --detach with the hook: %v", time.Since(step).Round(time.Millisecond))
	s, ino := p.checkHookSandbox(ctr, id, []netip.Addr{e.net.DNS6}, true)

	step = time.Now()
	probe := func(id string, args ...string) podmanResult {
		t.Helper()
		return p.podman(slices.Concat([]string{"exec", id, "/probe"}, args)...)
	}
	// HTTPS and HTTP, allowed and denied, by name and at a literal address.
	for _, via := range []netip.Addr{{}, apiAddr4} {
		args := []string{"get", "https://" + apiName + "/podman-hook", "--ca", "/ca.pem"}
		if via.IsValid() {
			args = append(args, "--resolve", apiName+":"+via.String())
		}
		if r := probe(id, args...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS (address %v): %v", via, r)
		}
	}
	if r := probe(id, "get", "http://"+apiName+"/plain"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") || !strings.Contains(r.stdout, "GET /plain") {
		t.Errorf("allowed HTTP: %v", r)
	}
	// A denied name does not even resolve: the DNS filter refuses it. Reached at its addresses, it gets the TLS alert, or the
	// 403 naming the host and the sandbox (the container id).
	if r := probe(id, "get", "https://"+evilName+"/", "--ca", "/ca.pem"); !probeFailed(r, 1) || !strings.Contains(r.stderr, "lookup "+evilName) {
		t.Errorf("denied name: want the probe to fail resolving it, got %v", r)
	}
	for _, via := range []netip.Addr{evilAddr4, evilAddr6} {
		r := probe(id, "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve", evilName+":"+via.String())
		if r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS (address %v): want the probe's exit 3 with a TLS access_denied alert, got %v", via, r)
		}
	}
	if r := probe(id, "get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 ||
		!strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, id) {
		t.Errorf("denied HTTP: want a 403 naming %s and %s, got %v", evilName, id, r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil host served %d requests", n)
	}
	// Raw TCP to hosts that are not allowed: nothing arrives.
	for _, dst := range []struct {
		host *testnet.Host
		addr netip.Addr
		port int
	}{
		{e.evil, evilAddr4, testnet.PortRecorder},
		{e.other, otherAddr, testnet.PortSSH},
	} {
		ap := netip.AddrPortFrom(dst.addr, uint16(dst.port)).String()
		if r := probe(id, "tcp", ap, "--send", "exfil\r\n", "--timeout", "3s"); !probeFailed(r, 4, 5) {
			t.Errorf("TCP to %s: want no reply, got %v", ap, r)
		}
		if n := dst.host.Received(dst.port); n != 0 {
			t.Errorf("%s received %d bytes on port %d", dst.host.Name(), n, dst.port)
		}
	}
	// UDP to anything but the resolver: nothing arrives.
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho),
		netip.AddrPortFrom(apiAddr4, testnet.PortHTTPS), // QUIC's port of an allowed host
	} {
		if r := probe(id, "udp", dst.String()); !probeFailed(r, 1, 4, 5) {
			t.Errorf("UDP to %v: want no answer, got %v", dst, r)
		}
	}
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho) + e.api.UDPDatagrams(testnet.PortHTTPS); n != 0 {
		t.Errorf("%d UDP datagrams arrived", n)
	}
	// DNS: the container's resolver answers for the allowed name (through
	// the DNS filter, which forwards to it) and not for the denied one;
	// the host's other resolver (not in the container's resolv.conf) and
	// the rogue server never see a query.
	if r := probe(id, "dns", e.net.DNS6.String(), apiName); r.exit != 0 || !strings.Contains(r.stdout, "rcode: NOERROR") || !strings.Contains(r.stdout, apiAddr4.String()) {
		t.Errorf("DNS to the container's resolver %v: %v", e.net.DNS6, r)
	}
	if r := probe(id, "dns", e.net.DNS6.String(), evilName); !strings.Contains(r.stdout, "rcode: REFUSED") || strings.Contains(r.stdout, evilAddr4.String()) {
		t.Errorf("DNS to the container's resolver %v for %s: want REFUSED, no address, got %v", e.net.DNS6, evilName, r)
	}
	for _, srv := range []netip.Addr{e.net.DNS, e.net.RogueDNS} {
		before := e.net.QueriesSeen(srv)
		if r := probe(id, "dns", srv.String(), apiName); !probeFailed(r, 1, 4, 5) {
			t.Errorf("DNS to %v, not the container's resolver: want no answer, got %v", srv, r)
		}
		if n := e.net.QueriesSeen(srv) - before; n != 0 {
			t.Errorf("DNS server %v saw %d queries from the container", srv, n)
		}
	}
	// The decision log under the hook's --log-dir, keyed by container id.
	e.waitDecision(ctr, decided(apiName, "allow"))
	e.waitDecision(ctr, decided(evilName, "deny"))
	e.waitDNSDecision(ctr, apiName, "allow")
	e.waitDNSDecision(ctr, evilName, "deny")
	t.Logf("checks in the hooked container: %v", time.Since(step).Round(time.Millisecond))

	// podman stop: Podman tears the network down and then, at the
	// container's cleanup, runs the poststop hook: proxy and state go.
	// podman start: a new netns, which createRuntime enforces anew.
	step = time.Now()
	p.mustPodman("stop", "--time", "0", id)
	waitGone(t, s.PID)
	assertHookSandboxGone(t, e, id)
	if holders := netnsHolders(ino); len(holders) != 0 {
		t.Errorf("the container's first netns (inode %d) is still held after podman stop: %v", ino, holders)
	}
	p.mustPodman("start", id)
	old := s
	s, ino = p.checkHookSandbox(ctr, id, []netip.Addr{e.net.DNS6}, true)
	if s.NetNS == old.NetNS || s.PID == old.PID {
		t.Errorf("after podman start: netns %s, proxy %d; before: %s, %d", s.NetNS, s.PID, old.NetNS, old.PID)
	}
	if r := probe(id, "get", "https://"+apiName+"/restarted", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("allowed HTTPS after podman start: %v", r)
	}
	if r := probe(id, "get", "https://"+evilName+"/restarted", "--ca", "/ca.pem", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("denied HTTPS after podman start: want the probe's exit 3 with a TLS access_denied alert, got %v", r)
	}
	t.Logf("podman stop, podman start: %v", time.Since(step).Round(time.Millisecond))

	// A container without doorman's annotation, on the same network: the
	// hooks' "when" does not match, so the hook never runs (were it run,
	// it would refuse the container: there is no default policy). Nothing
	// enforces its traffic, which shows that all the above was the hook's.
	step = time.Now()
	plain := p.mustPodman(slices.Concat([]string{"run", "--detach", "--name", "dm-plain-" + suffix}, runArgs(),
		[]string{probeImage, "/probe", "sleep", "10m"})...)
	plainPID := p.mustPodman("inspect", "--format", "{{.State.Pid}}", plain)
	if _, err := os.Stat(filepath.Join(e.stateDir, hook.Key(plain))); !os.IsNotExist(err) {
		t.Errorf("doorman state for the container without annotations: %v", err)
	}
	if pids := proxiesFor(plain); len(pids) != 0 {
		t.Errorf("proxy processes for the container without annotations: %v", pids)
	}
	if ok, err := enforce.Present("/proc/" + plainPID + "/ns/net"); ok || err != nil {
		t.Errorf("doorman's table in the netns of the container without annotations (%v)", err)
	}
	if r := probe(plain, "get", "https://"+evilName+"/plain", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+evilName+" ") {
		t.Errorf("HTTPS to %s from the container without annotations: %v", evilName, r)
	}
	recorder := netip.AddrPortFrom(evilAddr4, testnet.PortRecorder).String()
	probe(plain, "tcp", recorder, "--send", "exfil\r\n", "--timeout", "1s") // the recorder never answers
	if n := e.evil.Received(testnet.PortRecorder); n == 0 {
		t.Errorf("TCP to %s from the container without annotations: nothing arrived, so the zero count above proves nothing", recorder)
	}
	p.mustPodman("rm", "--force", "--time", "0", plain)
	t.Logf("container without annotations: %v", time.Since(step).Round(time.Millisecond))

	// A malformed annotation: the hook fails at createRuntime, Podman
	// refuses the container with doorman's message, nothing is left.
	step = time.Now()
	cidFile := filepath.Join(t.TempDir(), "cid")
	bad := "a*b.com"
	r := p.podman(slices.Concat([]string{"run", "--detach", "--name", "dm-bad-" + suffix, "--cidfile", cidFile},
		runArgs("--annotation", hook.AnnotationMode+"=allowlist", "--annotation", hook.AnnotationAllowedHosts+"="+bad),
		[]string{probeImage, "/probe", "sleep", "10m"})...)
	data, err := os.ReadFile(cidFile)
	if err != nil {
		t.Fatalf("the id of the refused container: %v (podman run: %v)", err, r)
	}
	badID := strings.TrimSpace(string(data))
	// Podman reports what crun's stderr and log hold: doorman's reason
	// (which crun itself throws away; see hook.reportToRuntime), then
	// crun's "error executing hook".
	want := "doorman: container " + badID + " not started: annotation " + hook.AnnotationAllowedHosts + `: "` + bad + `"`
	if r.exit == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("podman run with %s=%s: want it refused with doorman's message %q…, got %v", hook.AnnotationAllowedHosts, bad, want, r)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, hook.Key(badID))); !os.IsNotExist(err) {
		t.Errorf("doorman state for the refused container: %v", err)
	}
	if pids := proxiesFor(badID); len(pids) != 0 {
		t.Errorf("proxy processes for the refused container: %v", pids)
	}
	if states, _ := sandbox.List(e.stateDir); len(states) != 1 {
		t.Errorf("%d sandboxes recorded, want only the hooked container's", len(states))
	}
	t.Logf("refused container: %v", time.Since(step).Round(time.Millisecond))

	// The opt-out hooks: the policy comes from their default policy file;
	// DNS is not filtered (the denied name resolves), the proxy still
	// refuses it, and the label says both layers are missing.
	step = time.Now()
	optOut := p.mustPodman(slices.Concat([]string{"run", "--detach", "--name", "dm-optout-" + suffix},
		runArgs("--annotation", optOutAnnotation+"=off"), []string{probeImage, "/probe", "sleep", "10m"})...)
	optState, _ := p.checkHookSandbox(&container{key: hook.Key(optOut)}, optOut, []netip.Addr{e.net.DNS6}, false)
	if r := probe(optOut, "dns", e.net.DNS6.String(), evilName); r.exit != 0 || !strings.Contains(r.stdout, "rcode: NOERROR") || !strings.Contains(r.stdout, evilAddr4.String()) {
		t.Errorf("DNS for %s without the DNS filter: want its address, got %v", evilName, r)
	}
	if r := probe(optOut, "get", "https://"+evilName+"/", "--ca", "/ca.pem"); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("denied HTTPS by name without the DNS filter: want the probe's exit 3 with a TLS access_denied alert, got %v", r)
	}
	if r := probe(optOut, "get", "https://"+apiName+"/opt-out", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("allowed HTTPS without the DNS filter: %v", r)
	}
	p.mustPodman("rm", "--force", "--time", "0", optOut)
	waitGone(t, optState.PID)
	assertHookSandboxGone(t, e, optOut)
	t.Logf("container hooked without the DNS filter and the host-side layer: %v", time.Since(step).Round(time.Millisecond))

	// podman rm: the poststop hook stops the proxy and removes the state.
	// Podman has already torn the namespace down by then (it unmounts
	// /run/netns/netns-… when the container stops, before the hook runs);
	// with the proxy, whose listening sockets were its last hold on it,
	// gone, nothing holds the namespace, and the table went with it.
	step = time.Now()
	p.mustPodman("rm", "--force", "--time", "0", id)
	waitGone(t, s.PID)
	assertHookSandboxGone(t, e, id)
	if _, err := os.Stat(s.NetNS); !os.IsNotExist(err) {
		t.Errorf("the container's netns %s is left after podman rm: %v", s.NetNS, err)
	}
	if holders := netnsHolders(ino); len(holders) != 0 {
		t.Errorf("the container's netns (inode %d) is still held after podman rm: %v", ino, holders)
	}
	t.Logf("podman rm: %v", time.Since(step).Round(time.Millisecond))
}

// checkHookSandbox checks what the hook recorded for the running Podman
// container id and returns the state and the inode of its netns: Podman's
// pre-created netns (the spec's path, which names the container's
// namespace), the resolvers of the resolv.conf Podman bind-mounts, an
// in-namespace label matching the capabilities Podman gave the container,
// the DNS filter and the host-side layer (on Podman's veth) if layers, else
// neither, and the label they make; one proxy, and doorman's table in the
// namespace.
func (p *podmanEnv) checkHookSandbox(ctr *container, id string, resolvers []netip.Addr, layers bool) (*sandbox.State, uint64) {
	t := p.t
	t.Helper()
	s := p.e.state(ctr)
	netns := p.mustPodman("inspect", "--format", "{{.NetworkSettings.SandboxKey}}", id)
	if !strings.HasPrefix(netns, "/run/netns/") {
		t.Fatalf("podman's SandboxKey %q: want a netns it made under /run/netns", netns)
	}
	if s.Runtime != "hook" || s.ID != id || s.NetNS != netns || s.Mode != "allowlist" {
		t.Errorf("state: runtime %q id %q netns %q mode %q; want hook %q %q allowlist", s.Runtime, s.ID, s.NetNS, s.Mode, id, netns)
	}
	pid, err := strconv.Atoi(p.mustPodman("inspect", "--format", "{{.State.Pid}}", id))
	if err != nil {
		t.Fatalf("podman inspect: the container's pid: %v", err)
	}
	ino := netnsInode(t, pid)
	if got := p.sessionInode(netns); got != ino {
		t.Errorf("the recorded netns %s (inode %d) is not the container's (inode %d)", netns, got, ino)
	}
	if !slices.Equal(s.Resolvers, resolvers) {
		t.Errorf("resolvers %v, want %v (the resolv.conf podman bind-mounts, from --dns)", s.Resolvers, resolvers)
	}
	caps := p.mustPodman("inspect", "--format", "{{json .BoundingCaps}}", id)
	base := "full"
	if strings.Contains(caps, "CAP_NET_ADMIN") {
		base = "partial (container holds CAP_NET_ADMIN)"
	} else if strings.Contains(caps, "CAP_NET_RAW") {
		base = "partial (container holds CAP_NET_RAW)"
	}
	wantLabel := "full" // the host-side layer holds what the capabilities could undo
	if !layers {
		wantLabel = withDNSGap(base)
	}
	if s.BaseLabel != base || s.Label != wantLabel || s.HostLayer != layers || s.DNSFilter != layers {
		t.Errorf("label %q (in-namespace %q), host-side layer %v, DNS filter %v; want %q (%q), %v, %v (bounding capabilities %s)",
			s.Label, s.BaseLabel, s.HostLayer, s.DNSFilter, wantLabel, base, layers, layers, caps)
	}
	if pids := proxiesFor(id); !slices.Equal(pids, []int{s.PID}) {
		t.Fatalf("proxy processes for %s: %v, want the recorded pid %d", id, pids, s.PID)
	}
	if ok, err := enforce.Present(fmt.Sprintf("/proc/%d/ns/net", pid)); !ok || err != nil {
		t.Fatalf("no doorman table in the container's netns: %v", err)
	}
	return s, ino
}

// writePodmanHooks writes doorman's hooks.d files as shipped (hook/hooks.d),
// but with the binary under test as their path and, added to their
// arguments, the test's directories, a default policy file that does not
// exist, and the Net's resolver (the hook runs in Podman's namespace, the
// host one, so its proxy dials from there). The layers are left at their
// defaults: the DNS filter (forwarding to the resolvers the hook read) and
// the host-side layer are on.
func writePodmanHooks(t *testing.T, e *cniEnv, dir string) {
	t.Helper()
	writeHooksD(t, dir, "doorman", nil, []string{
		"--state-dir=" + e.stateDir,
		"--log-dir=" + e.logDir,
		"--default-policy=" + filepath.Join(dir, "no-default.policy"),
		"--upstream-resolver=" + netip.AddrPortFrom(e.net.DNS, 53).String(),
	})
}

// optOutAnnotation marks the containers the opt-out hooks serve.
const optOutAnnotation = "dm-test.io/layers"

// writePodmanOptOutHooks writes a second pair of hooks.d files, for
// containers annotated optOutAnnotation=off (and not doorman.io/mode): the
// shipped files with the test's directories, policyFile as the default
// policy, and both layers opted out.
func writePodmanOptOutHooks(t *testing.T, e *cniEnv, dir, policyFile string) {
	t.Helper()
	when := map[string]any{"annotations": map[string]any{"^" + strings.ReplaceAll(optOutAnnotation, ".", `\.`) + "$": "^off$"}}
	writeHooksD(t, dir, "doorman-opt-out", when, []string{
		"--state-dir=" + e.stateDir,
		"--log-dir=" + e.logDir,
		"--default-policy=" + policyFile,
		"--upstream-resolver=" + netip.AddrPortFrom(e.net.DNS, 53).String(),
		"--dns-filter=false",
		"--host-layer=false",
	})
}

// writeHooksD writes the shipped hooks.d files (hook/hooks.d) into dir as
// PREFIX-create.json and PREFIX-poststop.json, with the binary under test as
// their path, flags added to their arguments and, if when is not nil, when
// as their condition.
func writeHooksD(t *testing.T, dir, prefix string, when map[string]any, flags []string) {
	t.Helper()
	for _, file := range []string{"doorman-create.json", "doorman-poststop.json"} {
		data, err := os.ReadFile(filepath.Join("..", "hook", "hooks.d", file))
		if err != nil {
			t.Fatalf("the shipped hooks.d file: %v", err)
		}
		var h map[string]any
		if err := json.Unmarshal(data, &h); err != nil {
			t.Fatalf("hook/hooks.d/%s: %v", file, err)
		}
		entry, _ := h["hook"].(map[string]any)
		args, _ := entry["args"].([]any)
		if len(args) != 3 || args[1] != "hook" {
			t.Fatalf("hook/hooks.d/%s: args %v, want [doorman hook <stage>]", file, args)
		}
		entry["path"] = doormanBin()
		entry["args"] = slices.Concat(args[:2], anySlice(flags), args[2:])
		if when != nil {
			h["when"] = when
		}
		out, err := json.MarshalIndent(h, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.Replace(file, "doorman", prefix, 1)), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// sessionInode is the inode of the namespace file at path as the host
// session sees it (Podman's /run/netns bind mounts live in its mount
// namespace only).
func (p *podmanEnv) sessionInode(path string) uint64 {
	p.t.Helper()
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(p.sessionPID), "--mount", "--",
		"stat", "--dereference", "--format", "%i", path).CombinedOutput()
	if err != nil {
		p.t.Fatalf("stat %s in the host session: %v: %s", path, err, out)
	}
	ino, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		p.t.Fatalf("stat %s in the host session: %q", path, out)
	}
	return ino
}

// netnsHolders lists what still holds the network namespace with inode
// ino: processes in it, and open namespace file descriptors.
func netnsHolders(ino uint64) []string {
	want := fmt.Sprintf("net:[%d]", ino)
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		if l, _ := os.Readlink(filepath.Join("/proc", d.Name(), "ns", "net")); l == want {
			out = append(out, "process "+d.Name())
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name())); l == want {
				out = append(out, "fd "+fd.Name()+" of process "+d.Name())
			}
		}
	}
	return out
}

// assertHookSandboxGone checks that the hook left nothing of container id:
// no state, no proxy process (waiting a little: Podman may run the
// poststop hook from the container's cleanup process, after the command
// returned).
func assertHookSandboxGone(t *testing.T, e *cniEnv, id string) {
	t.Helper()
	dir := filepath.Join(e.stateDir, hook.Key(id))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := os.Stat(dir)
		pids := proxiesFor(id)
		if os.IsNotExist(err) && len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("container %s stopped or removed, but its state (%v) or proxy processes (%v) are left", id, err, pids)
			return
		}
	}
}

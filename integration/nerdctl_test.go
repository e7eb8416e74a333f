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

	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/testnet"
)

// TestNerdctl runs real containers with nerdctl on a private containerd,
// both ways doorman meets them: a CNI network whose conflist chains doorman
// after the bridge plugin (nerdctl's own OCI hook runs the chain), and a
// plain bridge network with doorman's runc wrapper as the runtime and the
// policy in `--label doorman.io/...` (nerdctl passes labels as OCI
// annotations). From inside each container the probe checks the allowed
// host, a denied one (TLS alert, 403) and TCP elsewhere; `nerdctl start`
// after a stop replaces the sandbox's proxy; a policy file named by the id
// `nerdctl create` printed applies at `nerdctl start`; `nerdctl rm` and `nerdctl run
// --rm` leave no state and no proxy; a container with neither labels nor a
// default policy is refused with doorman's message.
func TestNerdctl(t *testing.T) {
	skipUnlessRoot(t)
	for _, tool := range []string{"nerdctl", "containerd", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (.ci/run builds nerdctl v1.7.7 from its module; apt-get install containerd runc): %v", tool, err)
		}
	}
	begin := time.Now()
	e := newCNIEnv(t)
	n := newNerdctlEnv(t, e)
	suffix := strings.TrimPrefix(e.net.HostNS().Name(), "dm-host-")
	t.Logf("setup (fake internet, containerd, probe image): %v", time.Since(begin).Round(time.Millisecond))

	probe := func(id string, args ...string) nerdctlResult {
		t.Helper()
		return execExit(n.nerdctl(slices.Concat([]string{"exec", id, "/probe"}, args)...))
	}
	// checkEnforced runs the allowed and denied checks in container id,
	// whose sandbox is sandboxID ("default-<id>" for CNI, which nerdctl
	// gives the chain as the container id; the id for the hook).
	checkEnforced := func(id, sandboxID string) {
		t.Helper()
		evilBefore := e.evil.Requests() + e.evil.Received(testnet.PortRecorder)
		if r := probe(id, "get", "https://"+apiName+"/nerdctl", "--ca", "/ca.pem", "--resolve", apiName+":"+apiAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS: %v", r)
		}
		if r := probe(id, "get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS: want the probe's exit 3 with a TLS access_denied alert, got %v", r)
		}
		if r := probe(id, "get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, sandboxID) {
			t.Errorf("denied HTTP: want a 403 naming %s, got %v", sandboxID, r)
		}
		if r := probe(id, "tcp", netip.AddrPortFrom(evilAddr4, testnet.PortRecorder).String(), "--send", "hello\r\n", "--timeout", "3s"); !strings.Contains(r.stderr, "probe: ") || (r.exit != 4 && r.exit != 5) {
			t.Errorf("TCP to a recorder port of %s: want no reply, got %v", evilName, r)
		}
		if got := e.evil.Requests() + e.evil.Received(testnet.PortRecorder) - evilBefore; got != 0 {
			t.Errorf("evil saw %d requests and bytes", got)
		}
	}

	// The CNI network.
	step := time.Now()
	id := n.mustNerdctl(slices.Concat([]string{"run", "--detach", "--name", "dm-cni-" + suffix, "--network", n.network}, n.runArgs(),
		[]string{nerdctlProbeImage, "/probe", "sleep", "10m"})...)
	sandboxID := "default-" + id
	ctr := &container{key: sandboxID + "-eth0"}
	s := e.state(ctr)
	if s.Runtime != "cni" || s.ID != sandboxID || s.Network != n.network || s.IfName != "eth0" || s.Label != "full" {
		t.Errorf("state: runtime %q id %q network %q ifname %q label %q; want cni %q %q eth0 full", s.Runtime, s.ID, s.Network, s.IfName, s.Label, sandboxID, n.network)
	}
	if pids := proxiesFor(sandboxID); !slices.Equal(pids, []int{s.PID}) {
		t.Fatalf("proxy processes for %s: %v, want the recorded pid %d", sandboxID, pids, s.PID)
	}
	t.Logf("nerdctl run --detach on the CNI network: %v", time.Since(step).Round(time.Millisecond))
	checkEnforced(id, sandboxID)
	e.waitDecision(ctr, decided(apiName, "allow"))
	e.waitDecision(ctr, decided(evilName, "deny"))
	// The CLI knows the sandbox by the id nerdctl shows.
	if r := e.mustCLI("ls"); !strings.Contains(r.stdout, "default-"+id[:12]+" ") {
		t.Errorf("doorman ls: want the sandbox as default-%s, got\n%s", id[:12], r.stdout)
	}
	if r := e.mustCLI("show", id[:12]); !strings.Contains(r.stdout, sandboxID) {
		t.Errorf("doorman show %s: want sandbox %s, got\n%s", id[:12], sandboxID, r.stdout)
	}

	// nerdctl runs the chain's DEL when it deletes the stopped task, at
	// the next start (or rm), and ADD again: a new proxy, the same checks.
	step = time.Now()
	n.mustNerdctl("stop", "--time", "0", id)
	n.mustNerdctl("start", id)
	waitGone(t, s.PID)
	s2 := e.state(ctr)
	if pids := proxiesFor(sandboxID); s2.PID == s.PID || !slices.Equal(pids, []int{s2.PID}) {
		t.Fatalf("after stop and start: proxy processes %v, recorded pid %d (before: %d); want one new proxy", pids, s2.PID, s.PID)
	}
	checkEnforced(id, sandboxID)
	t.Logf("nerdctl stop, start and the checks: %v", time.Since(step).Round(time.Millisecond))

	n.mustNerdctl("rm", "--force", id)
	waitGone(t, s2.PID)
	assertSandboxGone(t, e, sandboxID)

	// A per-container policy file named by the id `nerdctl create`
	// prints, written before `nerdctl start` runs the chain: it allows
	// evil.
	step = time.Now()
	created := n.mustNerdctl(slices.Concat([]string{"create", "--name", "dm-wide-" + suffix, "--network", n.network}, n.runArgs(),
		[]string{nerdctlProbeImage, "/probe", "sleep", "10m"})...)
	if err := os.WriteFile(filepath.Join(e.policyDir, created), []byte(evilName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.mustNerdctl("start", created)
	if r := probe(created, "get", "https://"+evilName+"/wide", "--ca", "/ca.pem", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+evilName+" ") {
		t.Errorf("a policy file named by the nerdctl id, allowing %s: %v", evilName, r)
	}
	n.mustNerdctl("rm", "--force", created)
	assertSandboxGone(t, e, "default-"+created)
	t.Logf("nerdctl create, policy file, start: %v", time.Since(step).Round(time.Millisecond))

	// nerdctl run --rm: the container's one request is allowed, and its
	// sandbox goes with it.
	step = time.Now()
	cidFile := filepath.Join(t.TempDir(), "cid")
	r := n.nerdctl(slices.Concat([]string{"run", "--rm", "--cidfile", cidFile, "--network", n.network}, n.runArgs(),
		[]string{nerdctlProbeImage, "/probe", "get", "https://" + apiName + "/rm", "--ca", "/ca.pem", "--resolve", apiName + ":" + apiAddr4.String()})...)
	if r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("run --rm: %v", r)
	}
	data, err := os.ReadFile(cidFile)
	if err != nil {
		t.Fatalf("the container id of nerdctl run --rm: %v", err)
	}
	rmID := "default-" + strings.TrimSpace(string(data))
	e.waitDecision(&container{key: rmID + "-eth0"}, decided(apiName, "allow"))
	assertSandboxGone(t, e, rmID)
	t.Logf("nerdctl run --rm: %v", time.Since(step).Round(time.Millisecond))

	// The runc wrapper on a network without doorman, policy in labels.
	step = time.Now()
	hookArgs := func(name string, extra ...string) []string {
		return slices.Concat([]string{"run", "--detach", "--name", name, "--runtime", n.runtime, "--network", n.plainNetwork}, n.runArgs(),
			extra, []string{nerdctlProbeImage, "/probe", "sleep", "10m"})
	}
	id = n.mustNerdctl(hookArgs("dm-hook-"+suffix,
		"--label", hook.AnnotationMode+"=allowlist", "--label", hook.AnnotationAllowedHosts+"="+apiName)...)
	ctr = &container{key: hook.Key(id)}
	s = e.state(ctr)
	if s.Runtime != "hook" || s.ID != id || s.Name != "dm-hook-"+suffix || s.Mode != "allowlist" || s.Label != "full" || !s.HostLayer || !s.DNSFilter {
		t.Errorf("state: runtime %q id %q name %q mode %q label %q, host-side layer %v, DNS filter %v; want hook %q %q allowlist full, both layers",
			s.Runtime, s.ID, s.Name, s.Mode, s.Label, s.HostLayer, s.DNSFilter, id, "dm-hook-"+suffix)
	}
	if want := []netip.Addr{e.net.DNS, e.net.DNS6}; !slices.Equal(s.Resolvers, want) {
		t.Errorf("resolvers %v, want %v (the resolv.conf nerdctl bind-mounts, from --dns)", s.Resolvers, want)
	}
	if pids := proxiesFor(id); !slices.Equal(pids, []int{s.PID}) {
		t.Fatalf("proxy processes for %s: %v, want the recorded pid %d", id, pids, s.PID)
	}
	t.Logf("nerdctl run --detach with the runc wrapper: %v", time.Since(step).Round(time.Millisecond))
	checkEnforced(id, id)
	e.waitDecision(ctr, decided(evilName, "deny"))
	n.mustNerdctl("rm", "--force", id)
	waitGone(t, s.PID)
	if _, err := os.Stat(filepath.Join(e.stateDir, ctr.key)); !os.IsNotExist(err) {
		t.Errorf("state of %s left after nerdctl rm: %v", ctr.key, err)
	}
	if pids := proxiesFor(id); len(pids) != 0 {
		t.Errorf("proxy processes of %s left after nerdctl rm: %v", id, pids)
	}

	// No labels and no default policy: refused, never started unenforced.
	r = n.nerdctl(hookArgs("dm-nopolicy-" + suffix)...)
	if r.exit == 0 || !strings.Contains(r.stderr, "no doorman policy") || !strings.Contains(r.stderr, hook.AnnotationMode) {
		t.Errorf("a container without a policy: want nerdctl to fail with doorman's reason, got %v", r)
	}
	if ps := n.mustNerdctl("ps", "--quiet", "--filter", "name=dm-nopolicy-"+suffix); ps != "" {
		t.Errorf("a container without a policy is running: %s", ps)
	}
}

